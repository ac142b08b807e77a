package model

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// modelCache holds loaded models by source. Each source is loaded once, by the first
// caller; callers asking for the same source meanwhile wait for that load. A failed load
// is forgotten so that a fixed file can be loaded later.
type modelCache struct {
	mu      sync.Mutex
	entries map[string]*cacheEntry
}

type cacheEntry struct {
	done  chan struct{}
	model *Model
	err   error
}

var defaultCache = &modelCache{entries: map[string]*cacheEntry{}}

func (c *modelCache) load(source string) (*Model, error) {
	key, err := cacheKey(source)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if e, ok := c.entries[key]; ok {
		c.mu.Unlock()
		<-e.done
		return e.model, e.err
	}
	e := &cacheEntry{done: make(chan struct{})}
	c.entries[key] = e
	c.mu.Unlock()

	e.model, e.err = loadUncached(source)
	if e.err != nil {
		c.mu.Lock()
		delete(c.entries, key)
		c.mu.Unlock()
	}
	close(e.done)
	return e.model, e.err
}

func cacheKey(source string) (string, error) {
	if source == "" {
		return "", errors.New("model: empty model source")
	}
	if strings.HasPrefix(source, BuiltinPrefix) {
		return source, nil
	}
	abs, err := filepath.Abs(source)
	if err != nil {
		return "", fmt.Errorf("model: model folder %q: %v", source, err)
	}
	return abs, nil
}

func loadUncached(source string) (*Model, error) {
	if name, ok := strings.CutPrefix(source, BuiltinPrefix); ok {
		return loadBuiltin(source, name)
	}
	st, err := os.Stat(source)
	if err != nil {
		return nil, fmt.Errorf("model: model source %q is neither %s nor a readable folder: %v", source, builtinNames(), err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("model: model source %q is not a folder (want a folder with %s and %s)", source, fileTokenizer, fileTokenizerConfig)
	}
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(source, name)) }
	return loadHF(source, read)
}

// loadHF loads an HF model folder through read, which returns an error satisfying
// errors.Is(err, fs.ErrNotExist) for absent files.
func loadHF(source string, read func(name string) ([]byte, error)) (*Model, error) {
	path := func(name string) string { return filepath.Join(source, name) }
	readRequired := func(name string) ([]byte, error) {
		b, err := read(name)
		if err != nil {
			return nil, fmt.Errorf("model: %s: %v", path(name), err)
		}
		return b, nil
	}
	readOptional := func(name string) ([]byte, bool, error) {
		b, err := read(name)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("model: %s: %v", path(name), err)
		}
		return b, true, nil
	}

	tokData, err := readRequired(fileTokenizer)
	if err != nil {
		return nil, err
	}
	spec, err := parseTokenizerJSON(tokData, path(fileTokenizer))
	if err != nil {
		return nil, err
	}
	if onHFSpec != nil {
		onHFSpec(source, spec)
	}
	cfgData, err := readRequired(fileTokenizerConfig)
	if err != nil {
		return nil, err
	}
	cfg, err := parseTokenizerConfig(cfgData, path(fileTokenizerConfig))
	if err != nil {
		return nil, err
	}

	m := &Model{
		Source:           source,
		Tokenizer:        spec.tok,
		BOSToken:         cfg.tokens["bos_token"],
		EOSToken:         cfg.tokens["eos_token"],
		ContextLength:    cfg.modelMaxLength,
		PromptPrefixIDs:  spec.prefix,
		PromptSuffixIDs:  spec.suffix,
		tokenVars:        cfg.tokens,
		additionalTokens: cfg.additional,
	}
	tokenID := func(what, s string) (uint32, error) {
		if id, ok := spec.added[s]; ok {
			return id, nil
		}
		// Not an added token: the encoding of s must be a single token.
		if ids := spec.tok.Encode(s); len(ids) == 1 {
			return ids[0], nil
		}
		return 0, fmt.Errorf("model: %s: %s %q is not a token of %s", path(fileTokenizerConfig), what, s, fileTokenizer)
	}
	var bosID uint32
	if m.BOSToken != "" {
		if bosID, err = tokenID("bos_token", m.BOSToken); err != nil {
			return nil, err
		}
	}
	if m.EOSToken != "" {
		id, err := tokenID("eos_token", m.EOSToken)
		if err != nil {
			return nil, err
		}
		m.EOSTokenIDs = append(m.EOSTokenIDs, id)
	}
	if cfg.addBOSToken != nil {
		// add_bos_token overrides the post-processor (transformers' Llama tokenizers).
		switch {
		case *cfg.addBOSToken && m.BOSToken != "" && len(m.PromptPrefixIDs) == 0:
			m.PromptPrefixIDs = []uint32{bosID}
		case !*cfg.addBOSToken && m.BOSToken != "" && len(m.PromptPrefixIDs) > 0 && m.PromptPrefixIDs[0] == bosID:
			m.PromptPrefixIDs = m.PromptPrefixIDs[1:]
		}
	}

	// config.json: context length; its eos_token_id is used only without a
	// generation_config.json (transformers derives the generation config from it then).
	var modelCfg *loadConfig
	if data, ok, err := readOptional(ConfigFile); err != nil {
		return nil, err
	} else if ok {
		if modelCfg, err = parseLoadConfig(data, path(ConfigFile)); err != nil {
			return nil, err
		}
		if modelCfg.contextLength > 0 {
			m.ContextLength = modelCfg.contextLength
		}
	}
	var genEOS []uint32
	if data, ok, err := readOptional(GenerationConfigFile); err != nil {
		return nil, err
	} else if ok {
		if genEOS, err = parseLoadGenerationConfig(data, path(GenerationConfigFile)); err != nil {
			return nil, err
		}
	} else if modelCfg != nil {
		genEOS = modelCfg.eosTokenIDs
	}
	for _, id := range genEOS {
		if !containsID(m.EOSTokenIDs, id) {
			m.EOSTokenIDs = append(m.EOSTokenIDs, id)
		}
	}

	template := cfg.chatTemplate
	if data, ok, err := readOptional(fileChatTemplate); err != nil {
		return nil, err
	} else if ok {
		template = string(data)
	}
	if err := m.setChatTemplate(template); err != nil {
		return nil, fmt.Errorf("model: %s: %v", source, err)
	}
	return m, nil
}

// onHFSpec, when set (by tests only), sees every parsed tokenizer.json: the merges
// equivalence test reads the merges from the load it checks instead of parsing the file
// again.
var onHFSpec func(source string, spec *hfSpec)

func containsID(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
