"""The vocabulary every layer shares: errors, provenance labels, units and their grammar, clock
pairs, JSON and SQLite helpers, logging and progress. Imports nothing else of joulebound."""
