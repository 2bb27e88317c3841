package persistence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/stampede-sh/stampede/order"
)

// Identity is an identity provider's name of a user: the iss and sub of its
// tokens (table user_identity, migration 0010).
type Identity struct {
	Issuer  string
	Subject string
}

// userIDOf is the user id of user_identity row seq; seqOf its inverse.
func userIDOf(seq int64) int64 { return order.FirstMappedUserID - 1 + seq }
func seqOf(userID int64) int64 { return userID - order.FirstMappedUserID + 1 }

// MapSubject returns the user id of (issuer, subject), creating its row on
// first sight (auth.SubjectMapper). The same pair always gets the same id,
// also when several processes see it first at the same time: a read, and
// for a new pair one INSERT … ON DUPLICATE KEY UPDATE that answers the
// row's seq whether it inserted it or met it.
func (s *Store) MapSubject(ctx context.Context, issuer, subject string) (int64, error) {
	var seq int64
	err := s.DB.QueryRowContext(ctx, `SELECT seq FROM user_identity WHERE issuer = ? AND subject = ?`, issuer, subject).Scan(&seq)
	if err == nil {
		return userIDOf(seq), nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("persistence: map subject: %w", err)
	}
	res, err := s.DB.ExecContext(ctx, `INSERT INTO user_identity (issuer, subject) VALUES (?, ?)
		ON DUPLICATE KEY UPDATE seq = LAST_INSERT_ID(seq)`, issuer, subject)
	if err != nil {
		return 0, fmt.Errorf("persistence: map subject: %w", err)
	}
	if seq, err = res.LastInsertId(); err != nil || seq <= 0 {
		return 0, fmt.Errorf("persistence: map subject: no row id (%v)", err)
	}
	return userIDOf(seq), nil
}

// FindSubject returns the user ids of subject, of issuer only when issuer is
// not "", without creating anything (the support search): none when the
// subject was never seen; several only for one subject under several
// issuers (then in issuer order).
func (s *Store) FindSubject(ctx context.Context, issuer, subject string) ([]int64, error) {
	q, args := `SELECT seq FROM user_identity WHERE subject = ? ORDER BY issuer`, []any{subject}
	if issuer != "" {
		q, args = `SELECT seq FROM user_identity WHERE issuer = ? AND subject = ?`, []any{issuer, subject}
	}
	rows, err := s.DB.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("persistence: find subject: %w", err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return nil, fmt.Errorf("persistence: find subject: %w", err)
		}
		ids = append(ids, userIDOf(seq))
	}
	return ids, rows.Err()
}

// IdentityOf returns the provider identity of userID; ok is false for an id
// of the direct range (HS256 tokens) or one that no row has.
func (s *Store) IdentityOf(ctx context.Context, userID int64) (id Identity, ok bool, err error) {
	if userID < order.FirstMappedUserID {
		return Identity{}, false, nil
	}
	err = s.DB.QueryRowContext(ctx, `SELECT issuer, subject FROM user_identity WHERE seq = ?`, seqOf(userID)).Scan(&id.Issuer, &id.Subject)
	if errors.Is(err, sql.ErrNoRows) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("persistence: identity of %d: %w", userID, err)
	}
	return id, true, nil
}
