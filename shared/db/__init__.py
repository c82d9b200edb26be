"""The only package that talks to PostgreSQL (asyncpg). Everything beyond it sees plain values."""
