"""The schema's plain SQL migrations, applied in order by :mod:`wiscat.shared.db.migrate`."""
