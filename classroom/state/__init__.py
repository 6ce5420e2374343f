"""The class's shared state: this process or Redis, chosen in one place; the store of checkpoints."""
