import { useState } from "preact/hooks";
import { pb } from "../pb";
import { TextField, ErrorBox, errorMessage, fieldErrors, navigate } from "../ui";
import { useSession, setLoginMessage } from "../session";
import { Logo } from "../Logo";

export function Login() {
  const { loginMessage } = useSession();
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [errs, setErrs] = useState<Record<string, string>>({});
  const [mfa, setMfa] = useState<{ mfaId: string; otpId: string } | null>(null);
  const [otp, setOtp] = useState("");

  const done = () => {
    setLoginMessage(null);
    navigate("/collections");
  };

  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    setErrs({});
    try {
      if (mfa) {
        await pb.collection("_superusers").authWithOTP(mfa.otpId, otp, { mfaId: mfa.mfaId });
        return done();
      }
      await pb.collection("_superusers").authWithPassword(email, password);
      done();
    } catch (err: any) {
      const mfaId = err?.response?.mfaId;
      if (mfaId && !mfa) {
        try {
          const r = await pb.collection("_superusers").requestOTP(email);
          setMfa({ mfaId, otpId: r.otpId });
        } catch (e2) {
          setError(errorMessage(e2));
        }
      } else {
        setError(errorMessage(err));
        setErrs(fieldErrors(err));
      }
    } finally {
      setBusy(false);
    }
  }

  return (
    <main class="auth-page">
      <form class="auth-card" onSubmit={submit} aria-labelledby="login-title">
        <Logo />
        <h1 id="login-title">{mfa ? "One more step" : "Sign in"}</h1>
        <p class="muted">{mfa ? `Multi-factor authentication is on. We sent a one-time code to ${email}.` : "Superuser access to your Ferrobase server."}</p>
        {loginMessage && !error && <div class="alert alert-info" role="status" data-testid="login-message">{loginMessage}</div>}
        <ErrorBox error={error} />
        {!mfa ? (
          <>
            <TextField label="Email" type="email" name="email" value={email} onChange={setEmail} autocomplete="username" autofocus required error={errs.identity} />
            <TextField label="Password" type="password" name="password" value={password} onChange={setPassword} autocomplete="current-password" required error={errs.password} />
          </>
        ) : (
          <TextField label="One-time code" name="otp" value={otp} onChange={setOtp} autocomplete="one-time-code" autofocus required />
        )}
        <button class="btn btn-primary btn-block" type="submit" disabled={busy}>{busy ? "Signing in…" : mfa ? "Verify" : "Sign in"}</button>
        {mfa && <button type="button" class="btn btn-ghost btn-block" onClick={() => { setMfa(null); setOtp(""); }}>Back</button>}
      </form>
    </main>
  );
}
