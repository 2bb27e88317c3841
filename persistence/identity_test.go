package persistence_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/stampede-sh/stampede/order"
	"github.com/stampede-sh/stampede/persistence"
	"github.com/stampede-sh/stampede/persistence/persistencetest"
)

// TestMapSubject: provider subjects map to ids of the mapped range, one per
// (issuer, subject) byte for byte; two stores (two gateways) racing on the
// first sight of the same subjects agree on every id.
func TestMapSubject(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	other := persistencetest.New(t, "persistence") // a second process's pool on the same database
	ctx := context.Background()
	const kc = "https://id.shop.example/realms/buyers"
	first, err := s.MapSubject(ctx, kc, "3f6c1a52-8d0e-4c59-9a5e-0b7f3c1e2d4a")
	if err != nil || first != order.FirstMappedUserID {
		t.Fatalf("first subject: %d %v, want %d", first, err, order.FirstMappedUserID)
	}
	if again, err := other.MapSubject(ctx, kc, "3f6c1a52-8d0e-4c59-9a5e-0b7f3c1e2d4a"); err != nil || again != first {
		t.Fatalf("same subject again: %d %v, want %d", again, err, first)
	}
	seen := map[int64]string{first: "first"}
	for _, c := range []struct{ iss, sub string }{
		{"https://id.shop.example/realms/staff", "3f6c1a52-8d0e-4c59-9a5e-0b7f3c1e2d4a"}, // other issuer
		{kc, "3F6C1A52-8D0E-4C59-9A5E-0B7F3C1E2D4A"},                                     // other case
		{kc, "alice"}, {kc, "alice "}, {kc, "Ünïcødé"}, {kc, "1001"},
	} {
		id, err := s.MapSubject(ctx, c.iss, c.sub)
		if err != nil || id < order.FirstMappedUserID {
			t.Fatalf("%q/%q: %d %v", c.iss, c.sub, id, err)
		}
		if prev, dup := seen[id]; dup {
			t.Fatalf("%q/%q got the id of %s", c.iss, c.sub, prev)
		}
		seen[id] = c.iss + "/" + c.sub
	}

	// Two processes race on the first sight of 100 subjects.
	const n = 100
	ids := [2][n]int64{}
	var wg sync.WaitGroup
	for g, st := range []*persistence.Store{s, other} {
		wg.Go(func() {
			for i := range n {
				id, err := st.MapSubject(ctx, kc, fmt.Sprintf("race-%03d", i))
				if err != nil {
					t.Errorf("race %d: %v", i, err)
				}
				ids[g][i] = id
			}
		})
	}
	wg.Wait()
	distinct := map[int64]bool{}
	for i := range n {
		if ids[0][i] != ids[1][i] {
			t.Errorf("subject race-%03d: ids %d and %d", i, ids[0][i], ids[1][i])
		}
		distinct[ids[0][i]] = true
	}
	var rows int
	s.DB.QueryRow(`SELECT COUNT(*) FROM user_identity WHERE subject LIKE 'race-%'`).Scan(&rows)
	if len(distinct) != n || rows != n {
		t.Errorf("%d distinct ids, %d rows for %d subjects", len(distinct), rows, n)
	}

	// The support search finds without creating; the reverse lookup.
	if got, err := s.FindSubject(ctx, "", "3f6c1a52-8d0e-4c59-9a5e-0b7f3c1e2d4a"); err != nil || len(got) != 2 || !slices.Contains(got, first) {
		t.Errorf("find across issuers: %v %v", got, err)
	}
	if got, err := s.FindSubject(ctx, kc, "3f6c1a52-8d0e-4c59-9a5e-0b7f3c1e2d4a"); err != nil || !slices.Equal(got, []int64{first}) {
		t.Errorf("find under one issuer: %v %v", got, err)
	}
	if got, err := s.FindSubject(ctx, kc, "never-seen"); err != nil || len(got) != 0 {
		t.Errorf("find unknown: %v %v", got, err)
	}
	if id, ok, err := s.IdentityOf(ctx, first); err != nil || !ok || id != (persistence.Identity{Issuer: kc, Subject: "3f6c1a52-8d0e-4c59-9a5e-0b7f3c1e2d4a"}) {
		t.Errorf("identity of %d: %+v %v %v", first, id, ok, err)
	}
	if _, ok, err := s.IdentityOf(ctx, 42); ok || err != nil {
		t.Errorf("identity of a direct id: %v %v", ok, err)
	}
}

// TestLeastPrivilegeUser: a user with SELECT, INSERT, UPDATE and DELETE on
// the database only (docker-compose.yml's "stampede"; migrations run as
// another user) opens the store, maps subjects and takes the sweeper's
// advisory lock. Before, Open ran CREATE DATABASE IF NOT EXISTS, which such
// a user is refused.
func TestLeastPrivilegeUser(t *testing.T) {
	s := persistencetest.New(t, "persistence")
	// A user of the test's own: the server may be a developer's, or another run's.
	user, pass := fmt.Sprintf("stampede_test_dml_%06x", rand.Uint32()&0xffffff), "dml-test-0123456789"
	// Every host form a loopback connection may match (MariaDB's anonymous
	// ''@'localhost' would otherwise win over '%').
	hosts := []string{"%", "localhost", "127.0.0.1"}
	for _, h := range hosts {
		for _, q := range []string{
			"DROP USER IF EXISTS '" + user + "'@'" + h + "'",
			"CREATE USER '" + user + "'@'" + h + "' IDENTIFIED BY '" + pass + "'",
			"GRANT SELECT, INSERT, UPDATE, DELETE ON `" + persistencetest.Name(s) + "`.* TO '" + user + "'@'" + h + "'",
		} {
			if _, err := s.DB.Exec(q); err != nil {
				t.Skipf("cannot manage users on this server (%v)", err)
			}
		}
	}
	t.Cleanup(func() {
		for _, h := range hosts {
			s.DB.Exec("DROP USER IF EXISTS '" + user + "'@'" + h + "'")
		}
	})
	cfg, err := mysql.ParseDSN(persistencetest.DSNFor(t, "persistence"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.User, cfg.Passwd = user, pass
	dml, err := persistence.Open(context.Background(), cfg.FormatDSN())
	if err != nil {
		t.Fatalf("open as a DML-only user: %v", err)
	}
	defer dml.Close()
	if id, err := dml.MapSubject(context.Background(), "https://id.example/", "least-privilege"); err != nil || id < order.FirstMappedUserID {
		t.Fatalf("map subject as a DML-only user: %d %v", id, err)
	}
	lock, ok, err := dml.TryLock(context.Background(), "least-privilege")
	if err != nil || !ok {
		t.Fatalf("advisory lock as a DML-only user: %v %v", ok, err)
	}
	lock.Release()
	if _, err := dml.DB.Exec("CREATE TABLE x (id INT)"); err == nil {
		t.Fatal("the DML-only user could create a table")
	}
}
