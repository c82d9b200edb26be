"""The distributed registry of OAI-PMH base URLs (docs/registry.md).

- :mod:`wiscat.shared.registry.chain`: transactions and blocks in the seed's XML shapes, hashing,
  proof of work, Ed25519 signatures, chain verification and the fork-choice rule (pure, no I/O).
- :mod:`wiscat.shared.registry.keyfile`: the network key file (name, genesis block, peers, tracker,
  members' public keys).
- :mod:`wiscat.shared.registry.addresses`: which addresses a URL chosen by someone else may reach
  (the IANA special-purpose ranges written out, each with its RFC).
- :mod:`wiscat.shared.registry.safe_fetch`: the outbound HTTP client that refuses non-global
  addresses at connect time, and ports off the configured list before it.

The node that runs on them, :mod:`wiscat.shared.registry_node` (validation of submitted URLs,
minting, accepting blocks, fork choice on the stored chain, peers, tracker announces and sync), is
beside this package, not in it: it stands on the stores (:mod:`wiscat.shared.db`), which stand on
the chain's types here, and no import runs back up (an import-linter contract).
"""
