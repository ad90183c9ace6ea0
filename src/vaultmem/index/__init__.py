"""The index room: keeps the database's index equal to the notes committed at HEAD.

Git facts (`gitdiff`), parsing (`markdown`, `lexical`), the per-file decision (`paths`,
`sensitive`, `triage` with its `skips` codes, and `decision.decide`, which applies the user's
reviews), the single writer (`writer_lock`: the file lock; `statedir`: the pending mark, the
log, the progress file) and its passes (`ingest`), what a git hook runs (`hook_run`,
`git_hooks`), registration (`registration`), the review of quarantined files (`audit`), the
drift check (`verify`) and readers' freshness check (`freshness`).

Deliberately imports nothing: readers on the per-prompt path import `index.freshness` alone and
must not pay for the detector, YAML or the embedders.
"""
