package persistence_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

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
