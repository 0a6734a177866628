package plural

import "testing"

// Count picks the noun by the count: 1 takes the singular, 0, 2 and -1 the
// plural.
func TestCount(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Count(1, "entry", "entries"), "1 entry"},
		{Count(0, "entry", "entries"), "0 entries"},
		{Count(2, "drill", "drills"), "2 drills"},
		{Count(-1, "drill", "drills"), "-1 drills"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
