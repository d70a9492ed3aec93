"""Jepsen-style chaos suite: db, nemesis, generator, history, checkers, report."""
