# Inserts rows into an SQLite database, each in its own transaction, for
# the lock tests: argv: DB WRITER ROWS. SQLite locks the database file
# with fcntl byte-range locks (its unix VFS); busy_timeout retries.
import sqlite3
import sys

db, writer, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = sqlite3.connect(db, timeout=60, isolation_level=None)
c.execute("PRAGMA journal_mode=DELETE")
c.execute("CREATE TABLE IF NOT EXISTS t (writer TEXT, n INTEGER, total INTEGER)")
for i in range(rows):
    c.execute("BEGIN IMMEDIATE")
    # read-modify-write under the lock: a stale read shows as a wrong total
    (total,) = c.execute("SELECT COALESCE(MAX(total), 0) FROM t").fetchone()
    c.execute("INSERT INTO t VALUES (?, ?, ?)", (writer, i, total + 1))
    c.execute("COMMIT")
c.close()
print("ok")
