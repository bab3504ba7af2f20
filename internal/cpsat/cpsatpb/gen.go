// Package cpsatpb holds the protobuf messages exchanged with the OR-Tools CP-SAT
// C API: a hand-written, wire-compatible subset of the solver's own schema (see
// model.proto and parameters.proto). Regenerate with `go generate` after
// editing a .proto file; bin/protoc-gen-go comes from `make bootstrap`.
package cpsatpb

//go:generate protoc -I ../../.. --plugin=protoc-gen-go=../../../bin/protoc-gen-go --go_out=../../.. --go_opt=paths=source_relative internal/cpsat/cpsatpb/model.proto internal/cpsat/cpsatpb/parameters.proto
