package memcache

import "bytes"

var errAuthFailure = &ProtocolError{Kind: KindClientError, Msg: AuthFailureMessage}

// ParseAuthSet extracts the credentials of memcached's -Y authentication convention: the first
// request of a connection is "set <any key> <flags> <exptime> <bytes>" with the data block
// "<user> <password>". The error, when not nil, is the reply to send ("CLIENT_ERROR
// authentication failure"). user and password alias the request's buffer.
func ParseAuthSet(req *Request) (user, password []byte, err error) {
	if req.Command != CmdSet {
		return nil, nil, errAuthFailure
	}
	user, password, ok := bytes.Cut(req.Data, []byte(" "))
	if !ok || len(user) == 0 || len(password) == 0 {
		return nil, nil, errAuthFailure
	}
	return user, password, nil
}
