package bench

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// FuzzReadTrace: the trace readers (Mooncake JSONL, Azure CSV) on any bytes never panic;
// they either return an error naming the source, or requests that every reader of a
// workload may rely on: positive input and output lengths, one hash id per block of
// blockTokens tokens, arrivals that do not go backwards and lie within MaxArrival.
func FuzzReadTrace(f *testing.F) {
	for _, name := range []string{"testdata/mooncake.jsonl", "testdata/azure.csv"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, strings.HasSuffix(name, ".csv"), uint8(16))
	}
	f.Add([]byte("\ufeff{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": [1]}\n\n"), false, uint8(4))
	f.Add([]byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:46.6805900,1,1\n"), true, uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, azure bool, bt uint8) {
		blockTokens := int(bt%64) + 1
		var reqs []Request
		var err error
		if azure {
			reqs, err = ReadAzure(bytes.NewReader(data), "fuzz.csv", blockTokens, 0)
		} else {
			reqs, err = ReadMooncake(bytes.NewReader(data), "fuzz.jsonl", blockTokens, 0)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.") {
				t.Fatalf("error does not name the source: %v", err)
			}
			return
		}
		for i, r := range reqs {
			switch {
			case r.InputLength <= 0 || r.OutputLength <= 0:
				t.Fatalf("request %d: lengths %d, %d", i, r.InputLength, r.OutputLength)
			case len(r.HashIDs) != (r.InputLength+blockTokens-1)/blockTokens:
				t.Fatalf("request %d: %d hash ids for %d tokens in blocks of %d", i, len(r.HashIDs), r.InputLength, blockTokens)
			case r.Arrival < 0 || r.Arrival > MaxArrival:
				t.Fatalf("request %d: arrival %v", i, r.Arrival)
			case i > 0 && r.Arrival < reqs[i-1].Arrival:
				t.Fatalf("request %d: arrival %v before request %d's %v", i, r.Arrival, i-1, reqs[i-1].Arrival)
			}
		}
	})
}
