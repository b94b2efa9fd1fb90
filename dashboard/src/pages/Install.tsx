import { useMemo, useState } from "preact/hooks";
import { pb } from "../pb";
import { TextField, ErrorBox, errorMessage, fieldErrors, navigate } from "../ui";
import { Logo } from "../Logo";

function tokenExp(token: string): number {
  try {
    const p = JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return Number(p.exp) || 0;
  } catch {
    return 0;
  }
}

export function Install(props: { token: string }) {
  const valid = useMemo(() => tokenExp(props.token) * 1000 > Date.now(), [props.token]);
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [confirm, setConfirm] = useState("");
  const [busy, setBusy] = useState(false);
  const [expired, setExpired] = useState(!valid);
  const [error, setError] = useState<string | null>(null);
  const [errs, setErrs] = useState<Record<string, string>>({});

  async function submit(e: Event) {
    e.preventDefault();
    setError(null);
    setErrs({});
    if (password !== confirm) return setErrs({ passwordConfirm: "The passwords don't match." });
    setBusy(true);
    try {
      pb.authStore.save(props.token, null);
      await pb.collection("_superusers").create({ email, password, passwordConfirm: confirm });
      pb.authStore.clear();
      await pb.collection("_superusers").authWithPassword(email, password);
      navigate("/collections", true);
    } catch (err: any) {
      pb.authStore.clear();
      if (err?.status === 401 || err?.status === 403) setExpired(true);
      else {
        setError(errorMessage(err));
        setErrs(fieldErrors(err));
      }
    } finally {
      setBusy(false);
    }
  }

  return (
    <main class="auth-page">
      {expired ? (
        <div class="auth-card" data-testid="install-expired">
          <Logo />
          <h1>This installer link has expired</h1>
          <p>The link printed by <code>ferrobase serve</code> is valid for 30 minutes and only until the first superuser exists. Restart the server to get a new one, or create a superuser from the command line:</p>
          <pre class="code">ferrobase superuser upsert EMAIL PASSWORD</pre>
          <a class="btn btn-primary btn-block" href="#/login">Go to sign in</a>
        </div>
      ) : (
        <form class="auth-card" onSubmit={submit} aria-labelledby="install-title">
          <Logo />
          <h1 id="install-title">Create your superuser</h1>
          <p class="muted">Welcome to Ferrobase. Create the first superuser account to manage this server.</p>
          <ErrorBox error={error} />
          <TextField label="Email" type="email" name="email" value={email} onChange={setEmail} autocomplete="username" autofocus required error={errs.email} />
          <TextField label="Password" type="password" name="password" value={password} onChange={setPassword} autocomplete="new-password" required error={errs.password} hint="At least 8 characters." />
          <TextField label="Confirm password" type="password" name="passwordConfirm" value={confirm} onChange={setConfirm} autocomplete="new-password" required error={errs.passwordConfirm} />
          <button class="btn btn-primary btn-block" type="submit" disabled={busy}>{busy ? "Creating…" : "Create superuser and sign in"}</button>
        </form>
      )}
    </main>
  );
}
