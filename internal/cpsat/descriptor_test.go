package cpsat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/cacheqos/cacheqos/internal/cpsat/cpsatpb"
)

// TestWireCompatibleWithInstalledSolver checks every message, field and enum
// value of package cpsatpb against the schema of the OR-Tools build in use.
// The distribution carries no .proto files, but its Python modules embed the
// serialized FileDescriptorProto of each schema; the library and those
// modules come from the same build.
func TestWireCompatibleWithInstalledSolver(t *testing.T) {
	needSolver(t)
	// <pkg>/.libs/libortools.so.9 next to <pkg>/sat/*_pb2.py.
	satDir := filepath.Join(filepath.Dir(filepath.Dir(LibraryPath())), "sat")
	for _, tc := range []struct {
		ours   protoreflect.FileDescriptor
		module string
	}{
		{cpsatpb.File_internal_cpsat_cpsatpb_model_proto, "cp_model_pb2.py"},
		{cpsatpb.File_internal_cpsat_cpsatpb_parameters_proto, "sat_parameters_pb2.py"},
	} {
		t.Run(tc.module, func(t *testing.T) {
			theirs, err := descriptorFromPythonModule(filepath.Join(satDir, tc.module))
			if err != nil {
				t.Fatalf("OR-Tools schema not found next to %s: %v", LibraryPath(), err)
			}
			for _, problem := range compareFiles(tc.ours, theirs) {
				t.Error(problem)
			}
		})
	}
}

// descriptorFromPythonModule extracts the descriptor a generated _pb2.py
// module registers with AddSerializedFile(b'...').
func descriptorFromPythonModule(path string) (protoreflect.FileDescriptor, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	const call = "AddSerializedFile("
	i := bytes.Index(src, []byte(call))
	if i < 0 {
		return nil, fmt.Errorf("%s: no %s call", path, call)
	}
	raw, err := parsePythonBytesLiteral(src[i+len(call):])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var fdp descriptorpb.FileDescriptorProto
	if err := proto.Unmarshal(raw, &fdp); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// The schemas we mirror import nothing, so an empty resolver suffices.
	return protodesc.NewFile(&fdp, nil)
}

// parsePythonBytesLiteral decodes the bytes literal b'...' or b"..." at the
// start of src.
func parsePythonBytesLiteral(src []byte) ([]byte, error) {
	if len(src) < 3 || src[0] != 'b' || (src[1] != '\'' && src[1] != '"') {
		return nil, errors.New("expected a bytes literal b'...'")
	}
	quote := src[1]
	var out []byte
	for i := 2; i < len(src); i++ {
		c := src[i]
		switch {
		case c == quote:
			return out, nil
		case c == '\n' || c >= 0x80:
			return nil, fmt.Errorf("offset %d: byte %#x not allowed in a one-line bytes literal", i, c)
		case c != '\\':
			out = append(out, c)
			continue
		}
		i++
		if i >= len(src) {
			break
		}
		switch e := src[i]; e {
		case '\n': // line continuation
		case '\\', '\'', '"':
			out = append(out, e)
		case 'a':
			out = append(out, '\a')
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'v':
			out = append(out, '\v')
		case 'x':
			if i+2 >= len(src) {
				return nil, fmt.Errorf("offset %d: truncated \\x escape", i)
			}
			v, err := strconv.ParseUint(string(src[i+1:i+3]), 16, 8)
			if err != nil {
				return nil, fmt.Errorf("offset %d: bad \\x escape: %w", i, err)
			}
			out = append(out, byte(v))
			i += 2
		case '0', '1', '2', '3', '4', '5', '6', '7':
			end := i + 1
			for end < len(src) && end < i+3 && src[end] >= '0' && src[end] <= '7' {
				end++
			}
			v, _ := strconv.ParseUint(string(src[i:end]), 8, 16)
			out = append(out, byte(v)) // Python keeps the low byte too
			i = end - 1
		default: // Python keeps unknown escapes verbatim
			out = append(out, '\\', e)
		}
	}
	return nil, errors.New("unterminated bytes literal")
}

// compareFiles lists every way ours differs from theirs on the wire or in
// field semantics. Theirs may have more messages, fields and values.
func compareFiles(ours, theirs protoreflect.FileDescriptor) []string {
	var problems []string
	report := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if ours.Syntax() != theirs.Syntax() {
		report("%s: syntax %v, OR-Tools uses %v", ours.Path(), ours.Syntax(), theirs.Syntax())
	}
	for i := range ours.Enums().Len() {
		ourEnum := ours.Enums().Get(i)
		theirEnum := theirs.Enums().ByName(ourEnum.Name())
		if theirEnum == nil {
			report("enum %s: not in OR-Tools", ourEnum.Name())
			continue
		}
		for j := range ourEnum.Values().Len() {
			v := ourEnum.Values().Get(j)
			if tv := theirEnum.Values().ByName(v.Name()); tv == nil || tv.Number() != v.Number() {
				report("enum value %s.%s = %d: OR-Tools has %v", ourEnum.Name(), v.Name(), v.Number(), tv)
			}
		}
	}
	for i := range ours.Messages().Len() {
		msg := ours.Messages().Get(i)
		theirMsg := theirs.Messages().ByName(msg.Name())
		if theirMsg == nil {
			report("message %s: not in OR-Tools", msg.Name())
			continue
		}
		for j := range msg.Fields().Len() {
			if p := compareFields(msg.Fields().Get(j), theirMsg); p != "" {
				report("%s.%s", msg.Name(), p)
			}
		}
	}
	return problems
}

func compareFields(f protoreflect.FieldDescriptor, theirMsg protoreflect.MessageDescriptor) string {
	tf := theirMsg.Fields().ByNumber(f.Number())
	if tf == nil {
		return fmt.Sprintf("%s = %d: no field with that number in OR-Tools", f.Name(), f.Number())
	}
	type aspect struct {
		name         string
		ours, theirs any
	}
	aspects := []aspect{
		{"name", f.Name(), tf.Name()},
		{"kind", f.Kind(), tf.Kind()},
		{"cardinality", f.Cardinality(), tf.Cardinality()},
		{"packed", f.IsPacked(), tf.IsPacked()},
		{"presence", f.HasPresence(), tf.HasPresence()},
		{"oneof", oneofName(f), oneofName(tf)},
		{"has default", f.HasDefault(), tf.HasDefault()},
		{"default", fmt.Sprint(f.Default()), fmt.Sprint(tf.Default())},
	}
	if f.Message() != nil && tf.Message() != nil {
		aspects = append(aspects, aspect{"message type", f.Message().Name(), tf.Message().Name()})
	}
	if f.Enum() != nil && tf.Enum() != nil {
		aspects = append(aspects, aspect{"enum type", f.Enum().Name(), tf.Enum().Name()})
	}
	for _, a := range aspects {
		if a.ours != a.theirs {
			return fmt.Sprintf("%s = %d: %s is %v, OR-Tools has %v", f.Name(), f.Number(), a.name, a.ours, a.theirs)
		}
	}
	return ""
}

func oneofName(f protoreflect.FieldDescriptor) protoreflect.Name {
	if o := f.ContainingOneof(); o != nil {
		return o.Name()
	}
	return ""
}

func TestParsePythonBytesLiteral(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want string
		err  bool
	}{
		{`b'plain')`, "plain", false},
		{`b"q'uote"`, "q'uote", false},
		{`b'\x00\xff\n\t\r\\\'\"'`, "\x00\xff\n\t\r\\'\"", false},
		{`b'\0\12\101\1012'`, "\x00\n\x41\x412", false},
		{`b'\a\b\f\v'`, "\a\b\f\v", false},
		{`b'\d\q'`, `\d\q`, false},
		{"b'a\\\nb'", "ab", false},
		{`b'unterminated`, "", true},
		{`b'\x4'`, "", true},
		{`b'\xzz'`, "", true},
		{"b'new\nline'", "", true},
		{`'not bytes'`, "", true},
		{`b'trailing\`, "", true},
	} {
		got, err := parsePythonBytesLiteral([]byte(tc.src))
		if (err != nil) != tc.err || (err == nil && string(got) != tc.want) {
			t.Errorf("%s: got %q, %v; want %q (error %v)", tc.src, got, err, tc.want, tc.err)
		}
	}
}

// A literal the parser accepts decodes identically after re-encoding as a
// Python literal with hex escapes only; the parser never panics.
func FuzzParsePythonBytesLiteral(f *testing.F) {
	for _, seed := range []string{`b'abc'`, `b'\x00\x9a\n\''`, `b'\777'`, `b"\\"`, "b'\\\n'", `b'\`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		got, err := parsePythonBytesLiteral(src)
		if err != nil {
			return
		}
		var hex bytes.Buffer
		hex.WriteString("b'")
		for _, c := range got {
			fmt.Fprintf(&hex, "\\x%02x", c)
		}
		hex.WriteString("'")
		again, err := parsePythonBytesLiteral(hex.Bytes())
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("re-encoded %q decodes to %q, %v", hex.Bytes(), again, err)
		}
	})
}

// The comparison itself must notice each kind of drift.
func TestCompareFilesDetectsDrift(t *testing.T) {
	base := protodesc.ToFileDescriptorProto(cpsatpb.File_internal_cpsat_cpsatpb_parameters_proto)
	model := protodesc.ToFileDescriptorProto(cpsatpb.File_internal_cpsat_cpsatpb_model_proto)
	field := func(fdp *descriptorpb.FileDescriptorProto, msg, name string) *descriptorpb.FieldDescriptorProto {
		for _, m := range fdp.GetMessageType() {
			for _, f := range m.GetField() {
				if m.GetName() == msg && f.GetName() == name {
					return f
				}
			}
		}
		t.Fatalf("no field %s.%s", msg, name)
		return nil
	}
	for name, tc := range map[string]struct {
		file   *descriptorpb.FileDescriptorProto
		mutate func(fdp *descriptorpb.FileDescriptorProto)
	}{
		"field number": {base, func(fdp *descriptorpb.FileDescriptorProto) {
			field(fdp, "SatParameters", "num_workers").Number = proto.Int32(100)
		}},
		"field type": {base, func(fdp *descriptorpb.FileDescriptorProto) {
			field(fdp, "SatParameters", "random_seed").Type = descriptorpb.FieldDescriptorProto_TYPE_INT64.Enum()
		}},
		"default": {base, func(fdp *descriptorpb.FileDescriptorProto) {
			field(fdp, "SatParameters", "log_to_stdout").DefaultValue = proto.String("false")
		}},
		"field name": {base, func(fdp *descriptorpb.FileDescriptorProto) {
			field(fdp, "SatParameters", "num_workers").Name = proto.String("num_search_workers")
		}},
		"label": {model, func(fdp *descriptorpb.FileDescriptorProto) {
			f := field(fdp, "CpSolverResponse", "objective_value")
			f.Label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
		}},
		"packing": {model, func(fdp *descriptorpb.FileDescriptorProto) {
			field(fdp, "IntegerVariableProto", "domain").Options = &descriptorpb.FieldOptions{Packed: proto.Bool(false)}
		}},
		"message type": {model, func(fdp *descriptorpb.FileDescriptorProto) {
			field(fdp, "ConstraintProto", "linear").TypeName = proto.String(".cacheqos.cpsat.BoolArgumentProto")
		}},
		"oneof": {model, func(fdp *descriptorpb.FileDescriptorProto) {
			f := field(fdp, "ConstraintProto", "linear")
			f.OneofIndex = nil
		}},
		"enum value": {model, func(fdp *descriptorpb.FileDescriptorProto) {
			fdp.GetEnumType()[0].GetValue()[2].Number = proto.Int32(7)
		}},
		"missing message": {model, func(fdp *descriptorpb.FileDescriptorProto) {
			fdp.MessageType = fdp.GetMessageType()[:len(fdp.GetMessageType())-1] // CpSolverResponse
		}},
		"syntax": {base, func(fdp *descriptorpb.FileDescriptorProto) {
			fdp.Syntax = proto.String("proto3")
			for _, f := range fdp.GetMessageType()[0].GetField() {
				f.DefaultValue = nil
				f.Proto3Optional = proto.Bool(true)
			}
		}},
	} {
		ours, err := protodesc.NewFile(tc.file, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p := compareFiles(ours, ours); len(p) != 0 {
			t.Fatalf("identical files differ: %v", p)
		}
		mutated := proto.Clone(tc.file).(*descriptorpb.FileDescriptorProto)
		tc.mutate(mutated)
		theirs, err := protodesc.NewFile(mutated, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p := compareFiles(ours, theirs); len(p) == 0 {
			t.Errorf("%s: drift not detected", name)
		}
	}
}
