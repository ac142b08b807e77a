package enginehttp

import (
	"testing"

	"github.com/turbine-llm/turbine/messages"
)

func TestOptionalSampling(t *testing.T) {
	temp, topP, seed := OptionalSampling(&messages.SamplingParams{Temperature: 0.5, TopP: 0.9, Seed: 7})
	if temp != nil || topP != nil || seed != nil {
		t.Fatalf("unset parameters given: %v %v %v", temp, topP, seed)
	}
	temp, topP, seed = OptionalSampling(&messages.SamplingParams{HasTemperature: true, HasTopP: true, HasSeed: true, TopP: 0.9, Seed: -7})
	if temp == nil || *temp != 0 || topP == nil || *topP != 0.9 || seed == nil || *seed != -7 {
		t.Fatalf("set parameters: %v %v %v", temp, topP, seed)
	}
	if temp, topP, seed := OptionalSampling(nil); temp != nil || topP != nil || seed != nil {
		t.Fatal("nil parameters")
	}
}
