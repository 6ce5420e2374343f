"""What only the app uses, apart from ``mechlib`` (the notebook library)."""
