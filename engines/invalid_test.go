package engines

import "testing"

func TestInvalidRequestStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   bool
	}{
		{400, true}, {422, true},
		{401, false}, {403, false}, {404, false}, {405, false}, {408, false}, {413, false}, {429, false},
		{500, false}, {502, false}, {503, false}, {200, false}, {0, false},
	} {
		if got := InvalidRequestStatus(tc.status); got != tc.want {
			t.Errorf("InvalidRequestStatus(%d) = %v, want %v", tc.status, got, tc.want)
		}
	}
}
