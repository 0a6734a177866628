package temporalx

// NotificationDispatchWorkflowID is the workflow ID of the notification
// dispatcher (docs/design.md §3, notifications).
const NotificationDispatchWorkflowID = "notifications"

// NotifyProjectWorkflowID returns the workflow ID of the delivery of one
// project's notifications: "notify/<project>". One runs at a time per
// project, which keeps the project's deliveries in order.
func NotifyProjectWorkflowID(project string) string { return "notify/" + project }
