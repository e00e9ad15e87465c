package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/depositkit/deposit/client"
)

func TestLastAnswerIsTheInnermostTransportCause(t *testing.T) {
	cause := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	last := fmt.Errorf("PUT http://127.0.0.1:1/k: %w", cause)
	err := fmt.Errorf("%w after %d attempts: %w: %w", client.ErrUnresolved, 5, errors.New("backoff: attempts exhausted"), last)
	require.Equal(t, "connection refused", lastAnswer(err))
	require.Equal(t, "connection closed without an answer", lastAnswer(fmt.Errorf("%w: PUT x: %w", client.ErrUnresolved, io.EOF)))
}
