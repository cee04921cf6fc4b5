"""The robot stack: one Backend per benchmark family, one Robot facade defining every primitive once."""
