package coord

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

func members(demands ...int) []Member {
	ms := make([]Member, len(demands))
	for i, d := range demands {
		ms[i] = Member{Instance: fmt.Sprintf("g%d", i), Demand: d}
	}
	return ms
}

func TestShares(t *testing.T) {
	for _, tc := range []struct {
		limit   int
		demands []int
		first   int
		want    []int
	}{
		{8, []int{100, 100}, 0, []int{4, 4}},
		{9, []int{100, 100}, 0, []int{5, 4}},
		{9, []int{100, 100}, 1, []int{4, 5}},
		{10, []int{2, 100, 100}, 0, []int{2, 4, 4}},     // a small need is met, the rest split
		{10, []int{1, 3, 100}, 0, []int{1, 3, 6}},       // cascading needs
		{10, []int{1, 2, 3}, 0, []int{3, 3, 4}},         // all met: spare 4 split 2,1,1 from the first
		{10, []int{0, 0}, 0, []int{5, 5}},               // idle: everything spare
		{2, []int{100, 100, 100}, 0, []int{1, 1, 0}},    // fewer slots than members
		{2, []int{100, 100, 100}, 2, []int{1, 0, 1}},    // ...who goes without rotates
		{64, []int{0, 100}, 0, []int{0, 64}},            // an idle member needs nothing: the busy one gets all
		{5, []int{100}, 7, []int{5}},                    // alone
		{0, []int{3, 3}, 0, []int{0, 0}},                // nothing to share
		{7, []int{-3, 100}, 0, []int{0, 7}},             // a nonsense demand counts as 0
		{12, []int{5, 5, 5, 100}, 3, []int{3, 3, 3, 3}}, // equal split below the small needs
	} {
		got := Shares(tc.limit, members(tc.demands...), tc.first)
		assert.Equal(t, tc.want, got, "limit %d demands %v first %d", tc.limit, tc.demands, tc.first)
	}
}

func TestSharesSumToLimit(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		n := 1 + r.IntN(20)
		limit := r.IntN(200)
		ds := make([]int, n)
		for i := range ds {
			ds[i] = r.IntN(50)
		}
		got := Shares(limit, members(ds...), r.IntN(100))
		sum := 0
		for i, s := range got {
			sum += s
			assert.GreaterOrEqual(t, s, 0)
			// Max-min fairness: a member gets less than it needs only if
			// no other member gets more than it plus one.
			if s < ds[i] {
				for j, o := range got {
					assert.LessOrEqual(t, o, s+1, "limit %d demands %v shares %v: %d starved by %d", limit, ds, got, i, j)
				}
			}
		}
		assert.Equal(t, limit, sum, "limit %d demands %v shares %v", limit, ds, got)
	}
}
