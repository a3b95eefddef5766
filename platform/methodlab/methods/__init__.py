"""The registry: slug -> "module:SPEC". Imported lazily, so listing methods loads no method stack."""

REGISTRY: dict[str, str] = {
    "mtpp_threshold": "methodlab.methods.mtpp_threshold:SPEC",
    "min_swgg": "methodlab.methods.min_swgg:SPEC",
    "grokking_flatness": "methodlab.methods.grokking_flatness:SPEC",
    "unirl": "methodlab.methods.unirl:SPEC",
    "hier_retrieval": "methodlab.methods.hier_retrieval:SPEC",
    "ctsketch": "methodlab.methods.ctsketch:SPEC",
    "graphrta": "methodlab.methods.graphrta:SPEC",
    "gyroatt": "methodlab.methods.gyroatt:SPEC",
    "cmcl": "methodlab.methods.cmcl:SPEC",
    "strategic_causal": "methodlab.methods.strategic_causal:SPEC",
    "monotone_gbt": "methodlab.methods.monotone_gbt:SPEC",
    "more_longtail": "methodlab.methods.more_longtail:SPEC",
    "agbal": "methodlab.methods.agbal:SPEC",
    "discrete_structure": "methodlab.methods.discrete_structure:SPEC",
    "weakshot_keypoint": "methodlab.methods.weakshot_keypoint:SPEC",
    "ucan": "methodlab.methods.ucan:SPEC",
    "rule_unlearning": "methodlab.methods.rule_unlearning:SPEC",
    "ugodit": "methodlab.methods.ugodit:SPEC",
    "face": "methodlab.methods.face:SPEC",
}
