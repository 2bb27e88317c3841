package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Sentinel errors.
var (
	ErrNotFound     = errors.New("persistence: not found")
	ErrInvalidState = errors.New("persistence: invalid state") // the order is not in a status that allows the change
	ErrAmount       = errors.New("persistence: amount mismatch")
	ErrConflict     = errors.New("persistence: conflict") // a unique key with different content, e.g. a repairNo reused
	// ErrPaymentReused: a payment callback's paymentNo is already recorded
	// for another order; nothing changed.
	ErrPaymentReused = errors.New("persistence: paymentNo already used for another order")
	// ErrDrawOnePerOrder: a draw sells one unit per winner, so a product
	// whose waiting room is on as a draw keeps maxPerOrder 1 (a winner
	// ordering more would take the units of the winners after it). Both
	// changes that could break it — a room set to draw (SaveRoom) and a new
	// maxPerOrder (ChangeProduct) — check the other under the product row's
	// lock, so two admins (or two gateways with stale caches) cannot each
	// pass their check and together break it. Nothing changed.
	ErrDrawOnePerOrder = errors.New("persistence: a draw sells one unit per winner: maxPerOrder must be 1")
)

// Store is the MySQL store. Safe for concurrent use.
type Store struct {
	DB *sql.DB
}

// DefaultDSN is the DSN used when none is configured (docs/spec.md §7).
const DefaultDSN = "root@tcp(127.0.0.1:3306)/stampede?parseTime=true"

// LockWaitTimeout is the session's innodb_lock_wait_timeout unless the DSN
// sets one: a statement that waits this long for a row lock fails with MySQL
// error 1205 (IsLockWait, retryable). It is well below the consumer's
// per-message handle timeout (30s), so a long lock wait surfaces as what it
// is instead of a cancelled context and an abandoned ("invalid") connection;
// InnoDB's own default of 50s outlasted that timeout.
const LockWaitTimeout = 10 * time.Second

// NormalizeDSN parses dsn and forces what Stampede relies on: parseTime, UTC
// for the driver and the session (so NOW(3) and DATETIME values are UTC), and
// client-side interpolation (one round trip per statement). It sets the
// session's innodb_lock_wait_timeout to LockWaitTimeout unless the DSN names
// one.
func NormalizeDSN(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("persistence: parse dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	if _, ok := cfg.Params["innodb_lock_wait_timeout"]; !ok {
		cfg.Params["innodb_lock_wait_timeout"] = fmt.Sprint(int(LockWaitTimeout / time.Second))
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	return cfg, nil
}

// Open connects to dsn (see NormalizeDSN) and pings it, creating the
// database first only if it does not exist: a least-privilege user (DML on
// the database, docker-compose.yml's "stampede") can open an existing
// database, which CREATE DATABASE IF NOT EXISTS would refuse it.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := NormalizeDSN(dsn)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("persistence: open: %w", err)
	}
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	db.SetConnMaxLifetime(30 * time.Minute)
	err = db.PingContext(ctx)
	if isUnknownDatabase(err) {
		if err = EnsureDatabase(ctx, cfg); err == nil {
			err = db.PingContext(ctx)
		}
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("persistence: ping: %w", err)
	}
	return &Store{DB: db}, nil
}

// isUnknownDatabase reports whether err is MySQL error 1049 (unknown
// database).
func isUnknownDatabase(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1049
}

// EnsureDatabase creates cfg.DBName (utf8mb4, binary collation) if missing.
func EnsureDatabase(ctx context.Context, cfg *mysql.Config) error {
	if cfg.DBName == "" {
		return errors.New("persistence: dsn names no database")
	}
	c := cfg.Clone()
	c.DBName = ""
	db, err := sql.Open("mysql", c.FormatDSN())
	if err != nil {
		return fmt.Errorf("persistence: open server: %w", err)
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+cfg.DBName+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	if err != nil {
		return fmt.Errorf("persistence: create database %s: %w", cfg.DBName, err)
	}
	return nil
}

// Close closes the pool.
func (s *Store) Close() error { return s.DB.Close() }

// Ping checks that MySQL answers.
func (s *Store) Ping(ctx context.Context) error { return s.DB.PingContext(ctx) }

// WithTx runs fn in a READ COMMITTED transaction: committed if fn returns
// nil, rolled back otherwise (also on panic, which is re-raised).
//
// READ COMMITTED, not InnoDB's REPEATABLE READ: every invariant here rests on
// row locks (SELECT … FOR UPDATE on the order row), conditional updates and
// unique keys, never on a repeatable snapshot, and REPEATABLE READ's gap and
// next-key locks made the relay's claim (FOR UPDATE SKIP LOCKED) deadlock
// with concurrent outbox inserts.
func (s *Store) WithTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := s.DB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("persistence: begin: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			tx.Rollback()
			panic(p)
		}
		if err != nil {
			tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("persistence: commit: %w", err)
	}
	return nil
}

// IsDuplicate reports whether err is MySQL error 1062 (duplicate key).
func IsDuplicate(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// IsLockWait reports whether err is MySQL error 1205: a statement waited
// innodb_lock_wait_timeout for a row lock another transaction held.
func IsLockWait(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1205
}

// IsRetryable reports whether err is transient: a deadlock (1213), a lock
// wait timeout (1205), a lost or refused connection, or a read-only/shutdown
// server. Retrying the whole transaction may succeed.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213, 1205, 1040, 1053, 1290, 2006, 2013, 1927:
			return true
		}
		return false
	}
	// Anything that is not a MySQL server error is a transport problem:
	// connection refused, reset, bad connection, timeout.
	return !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalidState) &&
		!errors.Is(err, ErrAmount) && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrPaymentReused) &&
		!errors.Is(err, context.Canceled)
}

// Now returns the database clock (UTC, millisecond precision). Deadlines are
// compared on this clock, never the app's.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := s.DB.QueryRowContext(ctx, "SELECT NOW(3)").Scan(&t)
	return t, err
}
