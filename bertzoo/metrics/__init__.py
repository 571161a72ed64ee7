"""Scores of trained models, in plain numpy and checked in the tests against the field's reference
implementations: classification and tagging (`classification`), SQuAD (`squad`), generation (`generation`:
ROUGE, BLEU, exact match) and link prediction (`link_prediction`)."""
