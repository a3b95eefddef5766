"""The registry: slug -> "module:SPEC". Imported lazily, so listing methods loads no method stack."""

REGISTRY: dict[str, str] = {
    "grokking_flatness": "methodlab.methods.grokking_flatness:SPEC",
}
