package emulation

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Spec is the written form of Params, as it appears in topology and
// scenario YAML: every value is a string with its unit.
//
//	delay: 5ms
//	jitter: 1ms
//	distribution: normal
//	loss: 0.08%
//	loss-correlation: 25%
//	rate: 1gbit
//	limit: 1000
//	reorder: false
type Spec struct {
	Delay           string `yaml:"delay,omitempty" json:"delay,omitempty"`
	Jitter          string `yaml:"jitter,omitempty" json:"jitter,omitempty"`
	Distribution    string `yaml:"distribution,omitempty" json:"distribution,omitempty"`
	Loss            string `yaml:"loss,omitempty" json:"loss,omitempty"`
	LossCorrelation string `yaml:"loss-correlation,omitempty" json:"loss-correlation,omitempty"`
	Rate            string `yaml:"rate,omitempty" json:"rate,omitempty"`
	Limit           int    `yaml:"limit,omitempty" json:"limit,omitempty"`
	Reorder         bool   `yaml:"reorder,omitempty" json:"reorder,omitempty"`
}

// Params parses and validates s. Errors name the field.
func (s Spec) Params() (Params, error) {
	var p Params
	var err error
	if s.Delay != "" {
		if p.Delay, err = ParseDuration(s.Delay); err != nil {
			return Params{}, fmt.Errorf("delay: %w", err)
		}
	}
	if s.Jitter != "" {
		if p.Jitter, err = ParseDuration(s.Jitter); err != nil {
			return Params{}, fmt.Errorf("jitter: %w", err)
		}
	}
	p.Distribution = Distribution(strings.ToLower(strings.TrimSpace(s.Distribution)))
	if s.Loss != "" {
		if p.Loss, err = ParsePercent(s.Loss); err != nil {
			return Params{}, fmt.Errorf("loss: %w", err)
		}
	}
	if s.LossCorrelation != "" {
		if p.LossCorrelation, err = ParsePercent(s.LossCorrelation); err != nil {
			return Params{}, fmt.Errorf("loss-correlation: %w", err)
		}
	}
	if s.Rate != "" {
		if p.Rate, err = ParseRate(s.Rate); err != nil {
			return Params{}, fmt.Errorf("rate: %w", err)
		}
	}
	p.Limit = s.Limit
	p.Reorder = s.Reorder
	if err := p.Validate(); err != nil {
		return Params{}, err
	}
	return p, nil
}

// Spec renders p back into its written form; Spec().Params() returns p.
func (p Params) Spec() Spec {
	var s Spec
	if p.Delay != 0 {
		s.Delay = FormatDuration(p.Delay)
	}
	if p.Jitter != 0 {
		s.Jitter = FormatDuration(p.Jitter)
	}
	s.Distribution = string(p.Distribution)
	if p.Loss != 0 {
		s.Loss = FormatPercent(p.Loss)
	}
	if p.LossCorrelation != 0 {
		s.LossCorrelation = FormatPercent(p.LossCorrelation)
	}
	if p.Rate != 0 {
		s.Rate = FormatRate(p.Rate)
	}
	s.Limit = p.Limit
	s.Reorder = p.Reorder
	return s
}

// specKeys are the names accepted by ParseFlag, in the order they print.
var specKeys = []string{"delay", "jitter", "distribution", "loss", "loss-correlation", "rate", "limit", "reorder"}

// ParseFlag parses the one-line command-line form
// "delay=5ms,jitter=1ms,loss=0.08%,rate=1gbit" ("none" or "" is a perfect
// link).
func ParseFlag(s string) (Params, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return Params{}, nil
	}
	var spec Spec
	seen := map[string]bool{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return Params{}, fmt.Errorf("%q: want key=value with key one of %s", kv, strings.Join(specKeys, ", "))
		}
		if seen[k] {
			return Params{}, fmt.Errorf("%s: given twice", k)
		}
		seen[k] = true
		switch k {
		case "delay":
			spec.Delay = v
		case "jitter":
			spec.Jitter = v
		case "distribution":
			spec.Distribution = v
		case "loss":
			spec.Loss = v
		case "loss-correlation":
			spec.LossCorrelation = v
		case "rate":
			spec.Rate = v
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil {
				return Params{}, fmt.Errorf("limit: %q is not a packet count", v)
			}
			spec.Limit = n
		case "reorder":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Params{}, fmt.Errorf("reorder: %q is not true or false", v)
			}
			spec.Reorder = b
		default:
			keys := append([]string(nil), specKeys...)
			sort.Strings(keys)
			return Params{}, fmt.Errorf("unknown key %q: want one of %s", k, strings.Join(keys, ", "))
		}
	}
	return spec.Params()
}

// Flag renders p in the form ParseFlag accepts.
func (p Params) Flag() string {
	if p.IsZero() && !p.Reorder && p.Limit == 0 {
		return "none"
	}
	s := p.Spec()
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	add("delay", s.Delay)
	add("jitter", s.Jitter)
	add("distribution", s.Distribution)
	add("loss", s.Loss)
	add("loss-correlation", s.LossCorrelation)
	add("rate", s.Rate)
	if s.Limit != 0 {
		add("limit", strconv.Itoa(s.Limit))
	}
	if s.Reorder {
		add("reorder", "true")
	}
	return strings.Join(parts, ",")
}
