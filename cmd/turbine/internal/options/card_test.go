package options

import "testing"

// TestCardCarriesKVBytesPerToken: --kv-bytes-per-token reaches the card's architecture
// (the router's tier credits read it there); without it the card says nothing.
func TestCardCarriesKVBytesPerToken(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		want  int64
	}{{0, 0}, {512, 512}} {
		o := DefaultEngine()
		o.KVBytesPerToken = tc.bytes
		card, err := o.Card()
		if err != nil {
			t.Fatal(err)
		}
		if got := card.GetArchitecture().GetKvBytesPerToken(); got != tc.want {
			t.Errorf("--kv-bytes-per-token %d: card says %d, want %d", tc.bytes, got, tc.want)
		}
	}
}
