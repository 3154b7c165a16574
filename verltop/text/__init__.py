"""Text made from data, in one place: cells (sizes, durations, ages), the sentences of stalls, pending work,
wait chains, suspects, incidents and the doctor, the plain-text views of a snapshot and a dump, and the JSON
contracts.

Above analysis (it may use its results) and below the engine, the UI and the CLI, so a screen, a printed
table, an incident file and ``--json`` say the same thing in the same words. Pure functions of their
arguments; nothing here does I/O.
"""
