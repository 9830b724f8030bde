"""Training frameworks as inputs (`framework:` in a scenario): one YAML file each, what it does with sources."""
