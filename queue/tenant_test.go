package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func of(tenant string, u int) Priority { return Priority{Urgency: u, Tenant: tenant} }

func TestTenantsTakeTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		var calls []*call
		for _, n := range []string{"a1", "a2", "a3", "a4"} {
			calls = append(calls, startTenant(t, q, n, of("A", 5)))
		}
		for _, n := range []string{"b1", "b2"} {
			calls = append(calls, startTenant(t, q, n, of("B", 5)))
		}
		calls = append(calls, startTenant(t, q, "c1", of("C", 5)))

		assert.Equal(t, []TenantStats{
			{Name: "", InFlight: 1},
			{Name: "A", Waiting: 4},
			{Name: "B", Waiting: 2},
			{Name: "C", Waiting: 1},
		}, q.Tenants())
		assert.Equal(t, []string{"a1", "b1", "c1", "a2", "b2", "a3", "a4"}, grantOrder(t, q, "", calls...))
		assert.Empty(t, q.Tenants(), "nothing waits or runs")
	})
}

// Among tenants with as many calls in flight, the one served least
// recently goes first: a tenant that starts waiting goes ahead of those
// served since it was last served, and one never served ahead of all.
func TestTenantServedLeastRecentlyFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		a1 := startTenant(t, q, "a1", of("A", 5))
		a2 := startTenant(t, q, "a2", of("A", 5))
		b1 := startTenant(t, q, "b1", of("B", 5))
		b2 := startTenant(t, q, "b2", of("B", 5))
		q.ReleaseTenant("")
		require.NoError(t, <-a1.done) // A, then B
		c1 := startTenant(t, q, "c1", of("C", 5))
		q.ReleaseTenant("A")
		synctest.Wait()
		require.NoError(t, <-b1.done, "B before C, which started waiting later")
		b3 := startTenant(t, q, "b3", of("B", 5))
		assert.Equal(t, []string{"c1", "a2", "b2", "b3"}, grantOrder(t, q, "B", a2, b2, b3, c1))
	})
}

// A tenant with fewer calls in flight goes first: a job that starts
// while another holds most of the lane takes slots until they hold as
// many.
func TestTenantFewestInFlightFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 4})
		for range 3 {
			require.True(t, q.TryAcquire(of("A", 5)))
		}
		require.True(t, q.TryAcquire(fresh(3)))
		a4 := startTenant(t, q, "a4", of("A", 5))
		a5 := startTenant(t, q, "a5", of("A", 5))
		b1 := startTenant(t, q, "b1", of("B", 5))
		b2 := startTenant(t, q, "b2", of("B", 5))
		b3 := startTenant(t, q, "b3", of("B", 5))

		q.ReleaseTenant("")
		require.NoError(t, <-b1.done, "B holds none, A 3")
		q.ReleaseTenant("A")
		require.NoError(t, <-b2.done, "B holds 1, A 2")
		q.ReleaseTenant("A")
		require.NoError(t, <-a4.done, "B holds 2, A 1")
		assert.Equal(t, []TenantStats{{Name: "A", Waiting: 1, InFlight: 2}, {Name: "B", Waiting: 1, InFlight: 2}}, q.Tenants())
		q.ReleaseTenant("B")
		require.NoError(t, <-b3.done, "A and B hold 2 each; A was served last")
		q.ReleaseTenant("B")
		require.NoError(t, <-a5.done)
		assert.Equal(t, []TenantStats{{Name: "A", InFlight: 3}, {Name: "B", InFlight: 1}}, q.Tenants())
		for _, name := range []string{"A", "A", "A", "B"} {
			q.ReleaseTenant(name)
		}
		assert.Equal(t, Stats{Limit: 4}, q.Stats())
	})
}

// grantOrder releases the slot of holder, then each time the slot of the
// call just granted, and returns the names of calls in the order they
// were granted; it releases the last one's slot too.
func grantOrder(t *testing.T, q *Queue, holder string, calls ...*call) []string {
	t.Helper()
	q.ReleaseTenant(holder)
	first := waitOne(t, calls, nil)
	got := []string{first.name}
	for len(got) < len(calls) {
		q.ReleaseTenant(first.tenant)
		first = waitOne(t, calls, got)
		got = append(got, first.name)
	}
	q.ReleaseTenant(first.tenant)
	return got
}

// waitOne waits for the one call of calls, not named in seen, that a
// grant has just let out, and returns it.
func waitOne(t *testing.T, calls []*call, seen []string) *call {
	t.Helper()
	synctest.Wait()
	var granted []*call
	for _, c := range calls {
		if err, ok := c.finished(); ok && !contains(seen, c.name) {
			require.NoError(t, err, "call %s", c.name)
			granted = append(granted, c)
		}
	}
	require.Len(t, granted, 1, "one grant; granted before %v", seen)
	return granted[0]
}

func TestTenantsUrgencyFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		calls := []*call{
			startTenant(t, q, "a1-u5", of("A", 5)),
			startTenant(t, q, "a2-u5", of("A", 5)),
			startTenant(t, q, "b1-u5", of("B", 5)),
			startTenant(t, q, "a3-u1", of("A", 1)),
			startTenant(t, q, "a4-u1", of("A", 1)),
			startTenant(t, q, "b2-u1", of("B", 1)),
			startTenant(t, q, "b3-retry-u5", Priority{Urgency: 5, Retry: true, Tenant: "B"}),
			startTenant(t, q, "a5-retry-u5", Priority{Urgency: 5, Retry: true, Tenant: "A"}),
		}
		assert.Equal(t, []string{
			"a3-u1", "b2-u1", "a4-u1", // urgency first; the tenants take turns inside it
			"b3-retry-u5", "a5-retry-u5", // retries ahead of fresh calls, first in, first out
			"b1-u5", "a1-u5", "a2-u5", // B was served less recently than A
		}, grantOrder(t, q, "", calls...))
	})
}

func TestTenantCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(fresh(3)))
		a1 := startTenant(t, q, "a1", of("A", 5))
		b1 := startTenant(t, q, "b1", of("B", 5))
		b2 := startTenant(t, q, "b2", of("B", 5))
		c1 := startTenant(t, q, "c1", of("C", 5))
		a1.cancel() // A would go next and has no other call
		require.ErrorIs(t, <-a1.done, context.Canceled)
		assert.Equal(t, []TenantStats{{Name: "", InFlight: 1}, {Name: "B", Waiting: 2}, {Name: "C", Waiting: 1}}, q.Tenants())
		b2.cancel() // a call behind the head of B's own line
		require.ErrorIs(t, <-b2.done, context.Canceled)
		a2 := startTenant(t, q, "a2", of("A", 5))
		assert.Equal(t, []string{"b1", "c1", "a2"}, grantOrder(t, q, "", b1, c1, a2))
		assert.Empty(t, q.Tenants())
	})
}

// Two tenants, one with 32 clients and one with 2, each client sending its
// next call as soon as the last one ends, every call taking as long (the
// oldest call in flight ends first): the slot freed by a call goes to a
// waiting call at once, so each call of the small tenant waits for the
// next release, and then gets it. It takes 2 calls in limit + 1: half the
// lane at limit 3. Without tenants, first in, first out, it gets its 2
// clients' share: 2 in 34.
func TestTenantShareOfClosedLoops(t *testing.T) {
	share := func(t *testing.T, limit int, small, large string) float64 {
		var got float64
		synctest.Test(t, func(t *testing.T) {
			const steps = 340
			q := New(Config{Limit: limit})
			type client struct {
				tenant string
				small  bool
				c      *call
			}
			var clients []*client
			for i := range 2 {
				clients = append(clients, &client{tenant: small, small: true, c: startTenant(t, q, fmt.Sprintf("small-%d", i), of(small, 5))})
			}
			for i := range 32 {
				clients = append(clients, &client{tenant: large, c: startTenant(t, q, fmt.Sprintf("large-%d", i), of(large, 5))})
			}
			var running []*client // in grant order: the oldest ends first
			for _, cl := range clients {
				if _, ok := cl.c.finished(); ok {
					running = append(running, cl)
				}
			}
			require.Len(t, running, limit)
			smallGrants := 0
			for range steps {
				done := running[0]
				running = running[1:]
				q.ReleaseTenant(done.tenant)
				synctest.Wait()
				var next *client
				for _, cl := range clients {
					if cl == done {
						continue
					}
					if err, ok := cl.c.finished(); ok && !slices.Contains(running, cl) {
						require.NoError(t, err)
						require.Nil(t, next, "one grant per Release")
						next = cl
					}
				}
				require.NotNil(t, next)
				running = append(running, next)
				if next.small {
					smallGrants++
				}
				done.c = startTenant(t, q, done.c.name, of(done.tenant, 5)) // its next call
			}
			for _, cl := range clients {
				if !slices.Contains(running, cl) {
					cl.c.cancel()
					require.ErrorIs(t, <-cl.c.done, context.Canceled)
				}
			}
			for _, cl := range running {
				q.ReleaseTenant(cl.tenant)
			}
			require.Equal(t, Stats{Limit: limit}, q.Stats())
			got = float64(smallGrants) / steps
		})
		return got
	}
	assert.InDelta(t, 0.5, share(t, 3, "small", "large"), 0.01, "two tenants, limit 3")
	assert.InDelta(t, 0.4, share(t, 4, "small", "large"), 0.01, "two tenants, limit 4")
	assert.InDelta(t, 2.0/34, share(t, 3, "", ""), 0.01, "one tenant: first in, first out")
}

func TestTenantsBeyondMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1, MaxTenants: 2})
		require.True(t, q.TryAcquire(of("A", 3)))
		b1 := startTenant(t, q, "b1", of("B", 5))
		c1 := startTenant(t, q, "c1", of("C", 5)) // A and B hold the 2 entries
		d1 := startTenant(t, q, "d1", of("D", 5))
		b2 := startTenant(t, q, "b2", of("B", 5))
		assert.Equal(t, []TenantStats{
			{Name: "A", InFlight: 1},
			{Name: "B", Waiting: 2},
			{Name: OtherTenants, Waiting: 2},
		}, q.Tenants())

		// C and D share one turn: B, then one of theirs, then B.
		q.ReleaseTenant("A") // A's entry is idle now, but C stays folded while its call waits
		require.NoError(t, <-b1.done)
		c2 := startTenant(t, q, "c2", of("C", 5))
		assert.Equal(t, []TenantStats{
			{Name: "B", Waiting: 1, InFlight: 1},
			{Name: OtherTenants, Waiting: 3},
		}, q.Tenants())
		assert.Equal(t, []string{"c1", "b2", "d1", "c2"}, grantOrder(t, q, "B", c1, b2, d1, c2))
		assert.Empty(t, q.Tenants())

		// Idle entries are taken for new names.
		require.True(t, q.TryAcquire(of("E", 3)))
		require.True(t, q.TryAcquire(of("F", 3)) == false, "limit 1")
		q.SetLimit(3)
		require.True(t, q.TryAcquire(of("F", 3)))
		require.True(t, q.TryAcquire(of("G", 3)))
		assert.Equal(t, []TenantStats{{Name: "E", InFlight: 1}, {Name: "F", InFlight: 1}, {Name: OtherTenants, InFlight: 1}}, q.Tenants())
		q.ReleaseTenant("G")
		q.ReleaseTenant("F")
		q.ReleaseTenant("E")
		assert.Empty(t, q.Tenants())
		assert.LessOrEqual(t, len(q.tenants), 2, "entries bounded by MaxTenants")
		assert.Empty(t, q.other.folded, "no folded name left behind")
		assert.Panics(t, func() { New(Config{MaxTenants: -1}) })
	})
}

func TestReleaseTenantMismatch(t *testing.T) {
	q := New(Config{Limit: 2})
	require.True(t, q.TryAcquire(of("A", 3)))
	assert.Panics(t, func() { q.ReleaseTenant("B") }, "B holds no slot")
	assert.Panics(t, func() { q.ReleaseTenant("") }, "the tenant \"\" holds no slot")
	q.ReleaseTenant("A")
	assert.Panics(t, func() { q.ReleaseTenant("A") }, "released twice")
	assert.Equal(t, Stats{Limit: 2}, q.Stats())
}

func TestTenantGrantedAfterCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1})
		require.True(t, q.TryAcquire(of("A", 3)))
		raced := false
		q.testHookCancel = func() {
			if !raced {
				raced = true
				q.ReleaseTenant("A") // grants the cancelled waiter of B
			}
		}
		b := startTenant(t, q, "b", of("B", 3))
		c := startTenant(t, q, "c", of("C", 3))
		b.cancel()
		assert.ErrorIs(t, <-b.done, context.Canceled)
		require.True(t, raced)
		require.NoError(t, <-c.done, "the slot given back went to the next waiter")
		assert.Equal(t, []TenantStats{{Name: "C", InFlight: 1}}, q.Tenants())
		q.ReleaseTenant("C")
	})
}

func TestCloseEndsTenantWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 1, MaxTenants: 1})
		require.True(t, q.TryAcquire(of("A", 3)))
		a := startTenant(t, q, "a", of("A", 3))
		b := startTenant(t, q, "b", of("B", 5))
		r := startTenant(t, q, "r", Priority{Urgency: 0, Retry: true, Tenant: "B"})
		q.Close()
		for _, c := range []*call{a, b, r} {
			assert.ErrorIs(t, <-c.done, ErrClosed, c.name)
		}
		assert.Equal(t, []TenantStats{{Name: "A", InFlight: 1}}, q.Tenants())
		q.ReleaseTenant("A")
		assert.Empty(t, q.Tenants())
		assert.Empty(t, q.other.folded)
	})
}

// TestTenantAccounting runs a fixed random mix of calls of six tenants,
// three kept apart, at random urgencies, some retried, some cancelled, and
// checks after every step that the tenants' counts add up to the queue's
// and that no more than three entries are kept.
func TestTenantAccounting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := New(Config{Limit: 3, MaxTenants: 3})
		rng := rand.New(rand.NewPCG(1, 2))
		names := []string{"a", "b", "c", "d", "e", "f"}
		var waiting, running []*call
		check := func(step int) {
			s := q.Stats()
			var w, f int
			for _, ts := range q.Tenants() {
				w += ts.Waiting
				f += ts.InFlight
			}
			require.Equal(t, s.Waiting, w, "step %d: waiting", step)
			require.Equal(t, s.InFlight, f, "step %d: in flight", step)
			require.LessOrEqual(t, len(q.tenants), 3, "step %d", step)
			require.Equal(t, len(waiting), s.Waiting, "step %d", step)
			require.Equal(t, len(running), s.InFlight, "step %d", step)
		}
		// settle moves the calls that were granted from waiting to running.
		settle := func() {
			synctest.Wait()
			kept := waiting[:0]
			for _, c := range waiting {
				if err, ok := c.finished(); ok {
					require.NoError(t, err)
					running = append(running, c)
				} else {
					kept = append(kept, c)
				}
			}
			waiting = kept
		}
		for step := range 2000 {
			switch r := rng.IntN(10); {
			case r < 5:
				p := Priority{Urgency: rng.IntN(Urgencies), Retry: rng.IntN(4) == 0, Tenant: names[rng.IntN(len(names))]}
				waiting = append(waiting, startTenant(t, q, fmt.Sprint(step), p))
			case r < 6 && len(waiting) > 0:
				i := rng.IntN(len(waiting))
				c := waiting[i]
				waiting = slices.Delete(waiting, i, i+1)
				c.cancel()
				if err := <-c.done; err == nil { // granted first
					q.ReleaseTenant(c.tenant)
				}
			case len(running) > 0:
				i := rng.IntN(len(running))
				q.ReleaseTenant(running[i].tenant)
				running = slices.Delete(running, i, i+1)
			}
			settle()
			check(step)
		}
		for len(running) > 0 || len(waiting) > 0 {
			for _, c := range running {
				q.ReleaseTenant(c.tenant)
			}
			running = nil
			settle()
		}
		check(-1)
		assert.Empty(t, q.Tenants())
		require.NotNil(t, q.other, "some calls found every entry busy")
		assert.Empty(t, q.other.folded)
	})
}
