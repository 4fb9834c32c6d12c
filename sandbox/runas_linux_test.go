package sandbox

import "testing"

// TestMappedID: the landlock backend's picked id is one the user
// namespace maps: the plan's range on the host, the top quarter of a
// container's 65536 ids otherwise, never nobody.
func TestMappedID(t *testing.T) {
	host := [][2]int64{{0, 4294967294}}
	container := [][2]int64{{0, 65535}}
	seq := func(ids ...int) func() int {
		return func() int {
			id := ids[0]
			if len(ids) > 1 {
				ids = ids[1:]
			}
			return id
		}
	}
	for _, c := range []struct {
		name       string
		uids, gids [][2]int64
		next       func() int
		want       func(int) bool
	}{
		{"host", host, host, seq(1 << 30), func(id int) bool { return id == 1<<30 }},
		{"container", container, container, seq(1<<30 + 7), func(id int) bool { return id >= 49152 && id <= 65533 }},
		{"not-nobody", container, container, seq(49152+(65534-49152)+16384*10, 1<<30+1), func(id int) bool { return id != 65534 && id != 65535 && id >= 49152 }},
		{"gids-narrower", container, [][2]int64{{0, 1}, {1000, 2999}}, seq(1<<30 + 3), func(id int) bool { return id >= 1000+1999*3/4 && id <= 2999 }},
		{"unmapped", [][2]int64{{0, 0}}, [][2]int64{{0, 0}}, seq(1 << 30), func(id int) bool { return id == 1<<30 }},
	} {
		if got := mappedID(c.uids, c.gids, c.next); !c.want(got) {
			t.Errorf("%s: mappedID = %d", c.name, got)
		}
	}
}
