"""kubetrain's KFP v2 components (imported as ``kubetrain.components``)."""
