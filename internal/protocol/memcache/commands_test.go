package memcache

import (
	"strings"
	"testing"

	"github.com/cacheqos/cacheqos/internal/protocol"
)

func TestCommandSpecs(t *testing.T) {
	tests := []struct {
		cmd      Command
		class    protocol.Class
		handling protocol.Handling
	}{
		{CmdGet, protocol.ClassRead, protocol.HandleSplit},
		{CmdGets, protocol.ClassRead, protocol.HandleSplit},
		{CmdGat, protocol.ClassRead, protocol.HandleSplit},
		{CmdGats, protocol.ClassRead, protocol.HandleSplit},
		{CmdSet, protocol.ClassWrite, protocol.HandleRoute},
		{CmdAdd, protocol.ClassWrite, protocol.HandleRoute},
		{CmdReplace, protocol.ClassWrite, protocol.HandleRoute},
		{CmdAppend, protocol.ClassWrite, protocol.HandleRoute},
		{CmdPrepend, protocol.ClassWrite, protocol.HandleRoute},
		{CmdCas, protocol.ClassWrite, protocol.HandleRoute},
		{CmdDelete, protocol.ClassDelete, protocol.HandleRoute},
		{CmdIncr, protocol.ClassWrite, protocol.HandleRoute},
		{CmdDecr, protocol.ClassWrite, protocol.HandleRoute},
		{CmdTouch, protocol.ClassWrite, protocol.HandleRoute},
		{CmdMetaGet, protocol.ClassRead, protocol.HandleRoute},
		{CmdMetaSet, protocol.ClassWrite, protocol.HandleRoute},
		{CmdMetaDelete, protocol.ClassDelete, protocol.HandleRoute},
		{CmdMetaArithmetic, protocol.ClassWrite, protocol.HandleRoute},
		{CmdMetaDebug, protocol.ClassRead, protocol.HandleRoute},
		{CmdMetaNoop, protocol.ClassOther, protocol.HandleProxy},
		{CmdVersion, protocol.ClassOther, protocol.HandleAnyEngine},
		{CmdQuit, protocol.ClassOther, protocol.HandleProxy},
		{CmdVerbosity, protocol.ClassAdmin, protocol.HandleRefuse},
		{CmdFlushAll, protocol.ClassAdmin, protocol.HandleRefuse},
		{CmdStats, protocol.ClassAdmin, protocol.HandleRefuse},
		{CmdCacheMemlimit, protocol.ClassAdmin, protocol.HandleRefuse},
		{CmdShutdown, protocol.ClassAdmin, protocol.HandleRefuse},
		{CmdSlabs, protocol.ClassAdmin, protocol.HandleRefuse},
		{CmdLruCrawler, protocol.ClassAdmin, protocol.HandleRefuse},
		{CmdLru, protocol.ClassAdmin, protocol.HandleRefuse},
		{CmdWatch, protocol.ClassAdmin, protocol.HandleRefuse},
		{CmdExtstore, protocol.ClassAdmin, protocol.HandleRefuse},
	}
	if len(tests) != int(numCommands)-1 {
		t.Fatalf("%d commands tested, %d exist", len(tests), numCommands-1)
	}
	for _, tt := range tests {
		s := tt.cmd.Spec()
		if s.Class != tt.class || s.Handling != tt.handling {
			t.Errorf("%s: class %v handling %v, want %v %v", s.Name, s.Class, s.Handling, tt.class, tt.handling)
		}
		refused := s.Handling == protocol.HandleRefuse
		if refused != strings.HasPrefix(s.Refusal, "CLIENT_ERROR "+s.Name+" is not supported") {
			t.Errorf("%s: refusal %q", s.Name, s.Refusal)
		}
		if commandsByName[s.Name] != tt.cmd || tt.cmd.String() != s.Name {
			t.Errorf("%s: name lookup", s.Name)
		}
	}
	if Command(0).Spec().Handling != protocol.HandleRefuse || numCommands.String() != "unknown" {
		t.Error("out-of-range commands must be refused")
	}
}
