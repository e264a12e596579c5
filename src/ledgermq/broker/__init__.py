"""The broker: request processors, metadata managers, registration, wiring."""
