"""VLA policy primitive: one interface, an embedded scripted stand-in and an openpi client."""
