"""How good and how fast the judges are: accuracy on the RAGTruth dev rows against the peers, the probes,
claim-level agreement, token and time budgets, the embedded judge's speed."""
