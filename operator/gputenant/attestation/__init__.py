"""Isolation attestation: a canary pod per GPU pool measures what a tenant-shaped pod really sees
(`canary`), its report is judged against the pool's promise (`promise`, `verdict`, pure), and the
operator runs it and publishes the verdicts (`run`). See docs/attestation.md."""
