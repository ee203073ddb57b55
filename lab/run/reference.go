package run

import (
	"errors"
	"fmt"
	"math"
)

// Reference is a seed's published figures, which the report shows beside
// this run's, labelled as another testbed's: their hardware, their
// versions, never to be read as measured here.
//
//	reference:
//	  source: seed 002 (Red Hat, ICPE'25 slides), shared/reference/seed-scenarios.yaml
//	  testbed: bare metal, ~22.5 Gbit/s host baseline
//	  figures:
//	    - {measure: TCP stream, subject: istio, value: 14.9, unit: Gbit/s}
type Reference struct {
	Source  string            `yaml:"source" json:"source"`
	Testbed string            `yaml:"testbed" json:"testbed"`
	Figures []ReferenceFigure `yaml:"figures" json:"figures"`
}

// ReferenceFigure is one published number: what was measured, of what
// (their tool, and the lab tool standing for it), its value and unit.
type ReferenceFigure struct {
	Measure string  `yaml:"measure" json:"measure"`
	Subject string  `yaml:"subject" json:"subject"`
	Ours    string  `yaml:"ours" json:"ours,omitempty"` // the lab tool that stands for Subject
	Value   float64 `yaml:"value" json:"value"`
	Unit    string  `yaml:"unit" json:"unit"`
}

func (r *Reference) validate() error {
	if r.Source == "" || r.Testbed == "" {
		return errors.New("reference: source and testbed are required (whose numbers, measured on what)")
	}
	if len(r.Figures) == 0 {
		return errors.New("reference.figures: list at least one")
	}
	for i, f := range r.Figures {
		if f.Measure == "" || f.Subject == "" || f.Unit == "" {
			return fmt.Errorf("reference.figures[%d]: measure, subject and unit are required", i)
		}
		if math.IsNaN(f.Value) || math.IsInf(f.Value, 0) {
			return fmt.Errorf("reference.figures[%d].value: want a finite number", i)
		}
	}
	return nil
}
