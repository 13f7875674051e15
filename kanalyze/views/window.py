"""What limits what a capture can tell: damage in the files (a truncated capture ends early),
bytes never captured (gaps) and bytes skipped to find Kafka frames again. Every text view
says so next to the capture window, so nobody reads an incomplete capture as complete."""

from __future__ import annotations

from kanalyze.session import Session


def capture_notes(session: Session) -> list[str]:
    """One sentence per limit, after the session ran; empty for a clean capture."""
    notes = [
        f"{name}: offset {d.offset}: {d.message} (the capture ends early)"
        for name, d in session.capture.diagnostics
    ]
    es = session.engine.stats if session.engine is not None else None
    if es is not None:
        lost = es.client.gaps + es.broker.gaps
        skipped = es.client.skipped + es.broker.skipped
        if lost:
            gaps = es.client.gap_count + es.broker.gap_count
            notes.append(
                f"{lost:,} bytes never captured ({gaps} gaps): exchanges there are incomplete"
            )
        if skipped:
            notes.append(f"{skipped:,} bytes skipped while resynchronizing on Kafka frames")
    return notes
