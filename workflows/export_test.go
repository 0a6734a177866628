package workflows

// WaitWakeUps waits until c's scheduler wake-ups in flight are sent (or
// failed), for the client's tests.
func WaitWakeUps(c *Client) { c.waker.Wait() }
