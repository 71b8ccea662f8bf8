"""The version, in its own module so that any module can import it without importing the front door."""

__version__ = "0.1.0"
