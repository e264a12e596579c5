"""Child process for DLedger crash tests: append numbered entries, flush, checkpoint, vote.

Usage: python crash_writer.py BASE MAX_BATCHES
Failpoints come from LEDGERMQ_FAILPOINTS (e.g. "dledger.before_index_fsync=exit@7").
Prints, each after the step it names is done:
  ``try A B``      entries A..B are about to be appended
  ``ack N``        flush() returned persisted index N
  ``committed C``  the checkpoint now says committedIndex=C
  ``term T``       currterm now says currTerm=T
"""

from __future__ import annotations

import sys

from ledgermq.failpoints import arm_from_env
from ledgermq.store.dledger import DLedgerStore, TermState
from tests.store.dledger.helpers import body_for, small_config


def main() -> None:
    base, max_batches = sys.argv[1], int(sys.argv[2])
    arm_from_env()
    store = DLedgerStore.open(small_config(base))
    term = max(store.term_state.current_term, store.last_term, 1)
    for batch in range(max_batches):
        if batch % 5 == 4:
            term += 1
            store.save_term_state(TermState(term, "n0"))
            print(f"term {term}", flush=True)
        first = store.last_index + 1
        count = 1 + batch % 4
        print(f"try {first} {first + count - 1}", flush=True)
        store.append([(i, term, body_for(i)) for i in range(first, first + count)])
        print(f"ack {store.flush()}", flush=True)
        if batch % 3 == 2:
            print(f"committed {store.save_committed_index(store.persisted_index)}", flush=True)
    store.close()
    print("done", flush=True)


if __name__ == "__main__":
    main()
