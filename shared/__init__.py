"""What the provider, the harvester and the commands share: settings, database, protocol,
registry."""
