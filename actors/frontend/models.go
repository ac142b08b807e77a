package frontend

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
	"github.com/turbine-llm/turbine/gateway"
	"github.com/turbine-llm/turbine/messages"
	"github.com/turbine-llm/turbine/model"
)

// Defaults of LoaderConfig.
const (
	// DefaultFilesTimeout bounds one ModelFilesRequest to a worker.
	DefaultFilesTimeout = 30 * time.Second
	// DefaultRetryFailedLoad is how long a failed load is answered with its error before a
	// request tries again (so that a refusing worker is not asked once per request).
	DefaultRetryFailedLoad = time.Second
)

// LoaderConfig configures a ModelLoader. The zero value of each field means its default.
type LoaderConfig struct {
	// CacheDir holds the tokenizer folders fetched from workers, one per digest:
	// <CacheDir>/<tokenizer_digest>/ (default DefaultModelCacheDir()).
	CacheDir string
	// FilesTimeout bounds one ModelFilesRequest (default DefaultFilesTimeout).
	FilesTimeout time.Duration
	// RetryFailedLoad is how long a failed load is answered with its error before the
	// next request tries again (default DefaultRetryFailedLoad).
	RetryFailedLoad time.Duration
	// Now is the clock of RetryFailedLoad (default time.Now).
	Now    func() time.Time
	Logger zerolog.Logger
}

// DefaultModelCacheDir is ${TURBINE_CACHE_DIR:-$HOME/.cache/turbine}/models. Errors: no
// TURBINE_CACHE_DIR and no home directory.
func DefaultModelCacheDir() (string, error) {
	if dir := os.Getenv("TURBINE_CACHE_DIR"); dir != "" {
		return filepath.Join(dir, "models"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("frontend: no model cache folder: set TURBINE_CACHE_DIR (%v)", err)
	}
	return filepath.Join(home, ".cache", "turbine", "models"), nil
}

// ModelLoader loads the preprocessing of models from their cards (its Load is a
// gateway.ModelLoader). The tokenizer comes from:
//   - a builtin tokenizer: the embedded one;
//   - a card without tokenizer_digest: card.tokenizer as a local path, as
//     model.LoadModel takes it;
//   - the folder card.tokenizer names, when this machine has it and its files hash to
//     card.tokenizer_digest;
//   - else <CacheDir>/<digest>/, fetched once from card.files_from (ModelFilesRequest),
//     checked against the digest and written atomically, then reused by later loads and
//     later processes.
//
// Each (tokenizer, digest) pair is loaded once, by the first request; concurrent requests
// wait for that load. A failed load answers with its error for RetryFailedLoad, then is
// tried again. Loaded models are immutable and shared. Safe for concurrent use; no lock
// is held across a request to a worker.
type ModelLoader struct {
	cfg    LoaderConfig
	dirErr error // no CacheDir: fetching is impossible
	system func() *actor.ActorSystem

	mu      sync.Mutex
	entries map[loadKey]*loadEntry
	// onWait, when set (by tests only), is called when a Load waits for another's.
	onWait func()
}

type loadKey struct{ tokenizer, digest string }

type loadEntry struct {
	done    chan struct{}
	pre     gateway.Preprocessor
	err     error
	retryAt time.Time // set with err, before done closes
}

// NewModelLoader returns a ModelLoader that sends ModelFilesRequests through the actor
// system system returns at the time (the current member's, which may change).
func NewModelLoader(system func() *actor.ActorSystem, cfg LoaderConfig) *ModelLoader {
	l := &ModelLoader{system: system, entries: map[loadKey]*loadEntry{}}
	if cfg.CacheDir == "" {
		cfg.CacheDir, l.dirErr = DefaultModelCacheDir()
	}
	if cfg.FilesTimeout <= 0 {
		cfg.FilesTimeout = DefaultFilesTimeout
	}
	if cfg.RetryFailedLoad <= 0 {
		cfg.RetryFailedLoad = DefaultRetryFailedLoad
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l.cfg = cfg
	return l
}

// Load returns the preprocessing of card's model (see ModelLoader for where it comes
// from). Errors name the model, and the worker when fetching from it failed.
func (l *ModelLoader) Load(card *messages.ModelCard) (gateway.Preprocessor, error) {
	key := loadKey{card.GetTokenizer(), card.GetTokenizerDigest()}
	l.mu.Lock()
	if e, ok := l.entries[key]; ok {
		select {
		case <-e.done:
			if e.err == nil || l.cfg.Now().Before(e.retryAt) {
				l.mu.Unlock()
				return e.pre, e.err
			}
		default:
			l.mu.Unlock()
			if l.onWait != nil {
				l.onWait()
			}
			<-e.done
			return e.pre, e.err
		}
	}
	e := &loadEntry{done: make(chan struct{})}
	l.entries[key] = e
	l.mu.Unlock()

	e.pre, e.err = l.load(card)
	if e.err != nil {
		e.retryAt = l.cfg.Now().Add(l.cfg.RetryFailedLoad)
		l.cfg.Logger.Warn().Err(e.err).Str("model", card.GetModel()).Msg("tokenizer not loaded")
	}
	close(e.done)
	return e.pre, e.err
}

func (l *ModelLoader) load(card *messages.ModelCard) (gateway.Preprocessor, error) {
	source, err := l.source(card)
	if err != nil {
		return nil, err
	}
	m, err := model.LoadModel(source)
	if err != nil {
		return nil, fmt.Errorf("model %q: %w", card.GetModel(), err)
	}
	return gateway.PreprocessorOf(m), nil
}

// source returns what to hand model.LoadModel for card: its tokenizer as named, or
// the cache folder holding the files of its digest (fetched now when absent).
func (l *ModelLoader) source(card *messages.ModelCard) (string, error) {
	src, want := card.GetTokenizer(), card.GetTokenizerDigest()
	if src == "" || model.IsBuiltin(src) || want == "" {
		return src, nil
	}
	if !model.IsTokenizerDigest(want) {
		return "", fmt.Errorf("model %q: tokenizer_digest %q is not 64 lower-case hex digits", card.GetModel(), want)
	}
	if got, err := model.SourceDigest(src); err == nil && got == want {
		return src, nil
	} else if err == nil {
		l.cfg.Logger.Info().Str("model", card.GetModel()).Str("folder", src).Str("digest", got).Str("card_digest", want).
			Msg("local tokenizer folder differs from the workers': using theirs")
	}
	if l.dirErr != nil {
		return "", fmt.Errorf("model %q: tokenizer folder %q is not on this machine with digest %s, and there is no cache folder to fetch it into: %w",
			card.GetModel(), src, want, l.dirErr)
	}
	cached := filepath.Join(l.cfg.CacheDir, want)
	if got, err := model.SourceDigest(cached); err == nil && got == want {
		return cached, nil
	}
	if err := l.fetch(card, cached); err != nil {
		return "", err
	}
	return cached, nil
}

// fetch asks card.files_from for the files of card's tokenizer digest and writes them
// into folder dst.
func (l *ModelLoader) fetch(card *messages.ModelCard, dst string) error {
	ref, digest := card.GetFilesFrom(), card.GetTokenizerDigest()
	if ref.GetId() == "" {
		return fmt.Errorf("model %q: tokenizer folder %q is not on this machine with digest %s, and the catalog named no worker to fetch it from",
			card.GetModel(), card.GetTokenizer(), digest)
	}
	fail := func(err error) error {
		return fmt.Errorf("model %q: tokenizer files from worker %s/%s: %w", card.GetModel(), ref.GetAddress(), ref.GetId(), err)
	}
	files, err := l.request(ref, digest)
	if err != nil {
		return fail(err)
	}
	if err := writeFolder(dst, files); err != nil {
		return fail(err)
	}
	l.cfg.Logger.Info().Str("model", card.GetModel()).Str("worker", ref.GetAddress()+"/"+ref.GetId()).
		Str("folder", dst).Msg("tokenizer files fetched from a worker")
	return nil
}

// request sends a ModelFilesRequest for digest to the worker at ref and checks the answer.
func (l *ModelLoader) request(ref *messages.ActorRef, digest string) ([]model.TokenizerFile, error) {
	sys := l.system()
	if sys == nil {
		return nil, errors.New("no actor system to send ModelFilesRequest from")
	}
	res, err := sys.Root.RequestFuture(actor.NewPID(ref.GetAddress(), ref.GetId()), &messages.ModelFilesRequest{Digest: digest},
		l.cfg.FilesTimeout).Result()
	if err != nil {
		return nil, fmt.Errorf("ModelFilesRequest (timeout %v): %w", l.cfg.FilesTimeout, err)
	}
	answer, ok := res.(*messages.ModelFiles)
	if !ok {
		return nil, fmt.Errorf("ModelFilesRequest answered with %T, not ModelFiles", res)
	}
	return checkFiles(answer, digest)
}

// checkFiles returns the files of answer when it has no error, only files preprocessing
// reads (each once, at most model.MaxTokenizerBytes in all), and they hash to digest.
func checkFiles(answer *messages.ModelFiles, digest string) ([]model.TokenizerFile, error) {
	if answer.GetError() != "" {
		return nil, errors.New(answer.GetError())
	}
	files := make([]model.TokenizerFile, 0, len(answer.GetFiles()))
	seen := map[string]bool{}
	var total int64
	for _, f := range answer.GetFiles() {
		switch {
		case !model.IsTokenizerFile(f.GetName()):
			return nil, fmt.Errorf("file %q is not one of %v", f.GetName(), model.TokenizerFileNames())
		case seen[f.GetName()]:
			return nil, fmt.Errorf("file %q sent twice", f.GetName())
		}
		seen[f.GetName()] = true
		if total += int64(len(f.GetData())); total > model.MaxTokenizerBytes {
			return nil, fmt.Errorf("files total more than %d bytes", model.MaxTokenizerBytes)
		}
		files = append(files, model.TokenizerFile{Name: f.GetName(), Data: f.GetData()})
	}
	if got := model.TokenizerDigest(files); got != digest {
		return nil, fmt.Errorf("the files sent hash to %s, not to the card's tokenizer_digest %s", got, digest)
	}
	return files, nil
}

// writeFolder writes files into folder dst atomically: into a new folder next to it,
// synced, then renamed onto dst. A dst left by an earlier, broken write (or holding other
// files) is replaced; one that another process completed meanwhile with the same files is
// kept.
func writeFolder(dst string, files []model.TokenizerFile) error {
	parent := filepath.Dir(dst)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("cache folder: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dst)+".tmp-")
	if err != nil {
		return fmt.Errorf("cache folder: %w", err)
	}
	defer os.RemoveAll(tmp) // nothing left there after the rename
	for _, f := range files {
		if err := writeSynced(filepath.Join(tmp, f.Name), f.Data); err != nil {
			return fmt.Errorf("cache folder: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("cache folder: %w", err)
	}
	if os.Rename(tmp, dst) == nil {
		return syncDir(parent)
	}
	want := model.TokenizerDigest(files)
	if got, err := model.SourceDigest(dst); err == nil && got == want {
		return nil
	}
	if err := os.RemoveAll(dst); err != nil {
		return fmt.Errorf("cache folder: replace %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("cache folder: %w", err)
	}
	return syncDir(parent)
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cache folder: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("cache folder: sync %s: %w", dir, err)
	}
	return nil
}
