package persistence

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"time"
)

// AdvisoryLock is a held MySQL/MariaDB named lock (GET_LOCK) on a connection
// pinned from the pool. The server releases it when that connection ends, so
// a process that dies, or loses its connection, while holding it never
// leaves it held. Not safe for concurrent use.
type AdvisoryLock struct {
	conn *sql.Conn
	name string
}

// maxLockName is MySQL's limit on a GET_LOCK name (MariaDB has none).
const maxLockName = 64

// lockName scopes name to the store's database, so deployments (and test
// databases) sharing one server do not exclude each other: "stampede.<name>.<database>",
// with the database replaced by a hash when the result would exceed 64 characters.
func (s *Store) lockName(ctx context.Context, conn *sql.Conn, name string) (string, error) {
	var db sql.NullString
	if err := conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&db); err != nil {
		return "", err
	}
	full := "stampede." + name + "." + db.String
	if len(full) > maxLockName {
		sum := sha256.Sum256([]byte(db.String))
		full = "stampede." + name + "." + hex.EncodeToString(sum[:12])
	}
	if len(full) > maxLockName {
		return "", fmt.Errorf("lock name %q too long", name)
	}
	return full, nil
}

// TryLock takes the named advisory lock of the store's database without
// waiting (GET_LOCK(name, 0)). ok is false, with a nil lock and error, when
// another session holds it. The caller must Release a returned lock; until
// then it holds one pool connection.
//
// Errors: the connection or the query failed (MySQL down); no lock is held.
func (s *Store) TryLock(ctx context.Context, name string) (l *AdvisoryLock, ok bool, err error) {
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("persistence: lock %s: %w", name, err)
	}
	full, err := s.lockName(ctx, conn, name)
	if err != nil {
		conn.Close()
		return nil, false, fmt.Errorf("persistence: lock %s: %w", name, err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, full).Scan(&got); err != nil {
		// The statement may have taken the lock before failing: drop the
		// connection so the server releases it.
		discard(conn)
		return nil, false, fmt.Errorf("persistence: lock %s: %w", name, err)
	}
	if !got.Valid || got.Int64 != 1 {
		conn.Close()
		return nil, false, nil
	}
	return &AdvisoryLock{conn: conn, name: full}, true, nil
}

// Release gives the lock back and returns the connection to the pool. If
// RELEASE_LOCK fails (the connection broke: the server has released the lock
// already, or will when it notices) the connection is discarded instead, so a
// pooled connection never keeps the lock. It uses its own 5 s timeout, not
// the caller's context, so a cancelled pass still releases at once.
func (l *AdvisoryLock) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.conn.ExecContext(ctx, `DO RELEASE_LOCK(?)`, l.name); err != nil {
		discard(l.conn)
		return
	}
	l.conn.Close()
}

// discard closes conn's underlying connection instead of pooling it.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	conn.Close()
}
