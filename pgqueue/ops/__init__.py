"""Operations and inspection: operator actions (one run and bulk), inspection reads, retention,
health, metrics and stats.
"""
