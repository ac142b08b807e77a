package worker

import (
	"net/url"
	"testing"

	"github.com/rs/zerolog"

	"github.com/turbine-llm/turbine/engines"
)

// urlLauncher is an engineLauncher that passes on the base URL each engine client is
// made for (the engine's own listening address).
type urlLauncher struct {
	engineLauncher
	urls chan string
}

func (l urlLauncher) Connect(base string) engines.Engine {
	select {
	case l.urls <- base:
	default:
	}
	return l.engine
}

// TestRegistrationCarriesEngineURL: every registration of a started engine carries its
// base URL as other machines reach it (WorkerInfo.engine_url): the advertised host when
// one is set, else the listening host, with the port the engine was started on.
func TestRegistrationCarriesEngineURL(t *testing.T) {
	for _, tc := range []struct {
		name, host, advertise, wantHost string
	}{
		{"listening host", "127.0.0.1", "", "127.0.0.1"},
		{"advertised host", "127.0.0.1", "10.1.2.3", "10.1.2.3"},
		{"IPv6 advertised", "127.0.0.1", "fd00::7", "[fd00::7]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			urls := make(chan string, 4)
			_, _, info := startWorker(t, newDisaggEngine(), func(c *Config) {
				c.Host, c.AdvertiseHost = tc.host, tc.advertise
				c.Launcher = urlLauncher{engineLauncher: c.Launcher.(engineLauncher), urls: urls}
			}, zerolog.Nop())
			base, err := url.Parse(<-urls)
			if err != nil {
				t.Fatal(err)
			}
			if want := "http://" + tc.wantHost + ":" + base.Port(); info.EngineUrl != want {
				t.Fatalf("registered engine_url %q, want %q", info.EngineUrl, want)
			}
		})
	}
}
