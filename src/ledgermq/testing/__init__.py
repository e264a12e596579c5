"""Test support shipped with the package: crash simulation and store inspection helpers."""
