"""robotrl: offline-to-online robot learning."""
__version__ = "0.1.0"
