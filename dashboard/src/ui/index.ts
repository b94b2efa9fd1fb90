// Shared UI primitives (see CONTRACT.md). Keep these exports stable.
export { toast, toastError, dismissToast, Toasts } from "./toast";
export type { ToastKind } from "./toast";
export { Modal, confirmDialog, DialogHost } from "./modal";
export { Field, TextField, TextAreaField, NumberField, SelectField, CheckboxField, ListField, useId } from "./fields";
export { fieldErrors, errorMessage, scopedErrors } from "./errors";
export { Spinner, Loading, EmptyState, ErrorBox, PageHeader, Tabs, Badge, fmtDate, fmtBytes } from "./misc";
export { navigate, useRoute, link } from "../router";
