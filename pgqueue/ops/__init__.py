"""Operations and inspection: the Operator (operations.py, App's calls), operator actions (one
run and bulk), inspection reads, retention, health, metrics and stats.
"""
