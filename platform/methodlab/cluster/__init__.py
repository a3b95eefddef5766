"""Ray Jobs submission and KubeRay manifests."""
