"""The `monkeybarrel` command line."""
