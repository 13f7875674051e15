"""Every binding and the filter syntax on one screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

# a line ending in a backslash goes on in the next one: the screen shows them as one line
HELP = """\
[b]kanalyze tui[/b] — Kafka exchanges, decoded

[b]Views[/b]
  1  exchanges        2  replication (HW / LEO)     3  delivery semantics     4  consumer groups
  r  (re)run the analysis for the views 2-4 over what is indexed so far

[b]Exchanges view[/b]
  /          filter (Enter applies, Esc clears)       s / S   next sort column / reverse order
  ↑ ↓ PgUp PgDn Home End (or j k g G)  move in the table; click a header to sort by it
  Enter      go to the decoded tree                   c / x / d   focus connections / \
exchanges / detail
  Tab        next pane                                e       export the listed exchanges to NDJSON
  In the tree: ← → collapse / expand, ↑ ↓ move; the hex view marks the bytes of the field \
under the cursor
  C / H      hide / show the connections / hex pane (they fold away on a narrow terminal)
  [ ]  { }   hex pane wider / narrower, connections pane narrower / wider
  Ctrl-G     go to a frame (57) or an exchange (#12)       f   follow: only this row's connection
  T          time: relative / absolute (UTC) / delta from the row above
  In connections: Enter shows only that connection ("all connections" clears it)

[b]Filter terms[/b] (they combine with AND)
  api:Produce  api:0      request api name prefix, or api key
  topic:orders            topic name (or topic id prefix) substring
  client:web              client id or client address substring
  conn:3                  connection number
  status:ok | status:no_response | status:request_missing
  errors                  problems only: non-ok status or an error code in the response
  lat>5                   latency above 5 ms (no other comparison, no not/or: those are errors)
  other words             free text over api, client, addresses, correlation id, topics, errors

[b]Anywhere[/b]
  ?  this help     t  dark / light theme     q  quit     Esc  close this help
  Ctrl-P  command palette: every action by name
  In views 2-4: Enter on a finding, alert, transaction, rebalance or timeline entry opens its
  exchange; for a finding or an alert, the field it is about is selected in the tree
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-dialog"):
            yield Static(HELP, id="help-text")

    def action_close(self) -> None:
        self.dismiss(None)
