"""The one generic Ray Serve app for any method's Predictor (methodlab.serving.app:build)."""
