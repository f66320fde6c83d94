package strategy

import (
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// named is a strategy with any name, to exercise the registry.
type named struct {
	OldestEmulationVersion
	name coordinationv1.CoordinatedLeaseStrategy
}

func (n named) Name() coordinationv1.CoordinatedLeaseStrategy { return n.name }

func TestNewRegistry(t *testing.T) {
	tests := []struct {
		name       string
		strategies []Strategy
		wantErr    string
		wantNames  []coordinationv1.CoordinatedLeaseStrategy
	}{
		{name: "empty", wantNames: []coordinationv1.CoordinatedLeaseStrategy{}},
		{
			name:       "sorted names",
			strategies: []Strategy{named{name: "example.com/Zeta"}, Priority{}, OldestEmulationVersion{}, named{name: "example.com/Alpha"}},
			wantNames:  []coordinationv1.CoordinatedLeaseStrategy{"OldestEmulationVersion", "cle.dev/Priority", "example.com/Alpha", "example.com/Zeta"},
		},
		{name: "nil", strategies: []Strategy{OldestEmulationVersion{}, nil}, wantErr: "strategy #1 is nil"},
		{name: "empty name", strategies: []Strategy{named{}}, wantErr: "strategy name is empty"},
		{name: "unprefixed name", strategies: []Strategy{named{name: "Random"}}, wantErr: `strategy "Random" is not supported`},
		{name: "bad prefix", strategies: []Strategy{named{name: "Example.com/X"}}, wantErr: "not a qualified name"},
		{
			name:       "duplicate",
			strategies: []Strategy{Priority{}, OldestEmulationVersion{}, named{name: PriorityName}},
			wantErr:    `name "cle.dev/Priority" is already registered by strategy.Priority`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRegistry(tt.strategies...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewRegistry = %v, want an error containing %q", err, tt.wantErr)
				}
				if r != nil {
					t.Errorf("NewRegistry returned a registry with its error")
				}
				return
			}
			if err != nil {
				t.Fatalf("NewRegistry: %v", err)
			}
			if got := r.Names(); !slices.Equal(got, tt.wantNames) {
				t.Errorf("Names = %q, want %q", got, tt.wantNames)
			}
			for _, s := range tt.strategies {
				if got, ok := r.Get(s.Name()); !ok || got != s {
					t.Errorf("Get(%q) = %v, %t, want %v", s.Name(), got, ok, s)
				}
			}
			if s, ok := r.Get("example.com/Unknown"); ok || s != nil {
				t.Errorf("Get(unknown) = %v, %t, want nil, false", s, ok)
			}
		})
	}
}

func TestNewDefaultRegistry(t *testing.T) {
	r1, r2 := NewDefaultRegistry(), NewDefaultRegistry()
	if r1 == r2 {
		t.Fatal("NewDefaultRegistry returned the same registry twice")
	}
	want, err := NewRegistry(OldestEmulationVersion{}, Priority{}, OldestEmulationVersionByCle{})
	if err != nil {
		t.Fatalf("the default strategies do not pass NewRegistry: %v", err)
	}
	if got := r1.Names(); !slices.Equal(got, want.Names()) {
		t.Fatalf("Names = %q, want %q", got, want.Names())
	}
	for _, name := range want.Names() {
		if s, ok := r1.Get(name); !ok || s.Name() != name {
			t.Errorf("Get(%q) = %v, %t", name, s, ok)
		}
	}
	names := r1.Names()
	names[0] = "mutated"
	if r1.Names()[0] == "mutated" {
		t.Error("Names returned the registry's own slice")
	}
}

func TestValidateStrategyName(t *testing.T) {
	tests := []struct {
		name    coordinationv1.CoordinatedLeaseStrategy
		wantErr string
	}{
		{name: coordinationv1.OldestEmulationVersion},
		{name: PriorityName},
		{name: "example.com/My_Strategy.v2"},
		{name: "", wantErr: "empty"},
		{name: "oldestEmulationVersion", wantErr: "not supported"},
		{name: "Priority", wantErr: "not supported"},
		{name: "/Priority", wantErr: "prefix part"},
		{name: "cle.dev/", wantErr: "name part"},
		{name: "a/b/c", wantErr: "not a qualified name"},
		{name: "cle.dev/-bad", wantErr: "name part"},
		{name: "CLE.dev/Priority", wantErr: "prefix part"},
		{name: coordinationv1.CoordinatedLeaseStrategy("cle.dev/" + strings.Repeat("x", 64)), wantErr: "63"},
	}
	for _, tt := range tests {
		t.Run(string(tt.name), func(t *testing.T) {
			err := ValidateStrategyName(tt.name)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("ValidateStrategyName = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("ValidateStrategyName = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
